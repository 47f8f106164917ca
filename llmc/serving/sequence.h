// What the serving scheduler (llmc/serving/scheduler.h) takes and reports: a sequence's request (prompt, limits, rule,
// seed, callbacks), how it ended, whether it was admitted, the scheduler's options and counters. Host-only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/serving/serve_engine.h"

enum class FinishReason { Stop, Length, Cancelled, Error };

inline const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Error: return "error";
    }
    return "?";
}

struct SequenceEnd {
    FinishReason reason = FinishReason::Stop;
    int prompt_tokens = 0;
    int completion_tokens = 0;  // every token delivered, the stop token included
    double queued_ms = 0;       // submission to a slot
    double first_token_ms = 0;  // submission to the first token (0: none)
    double total_ms = 0;        // submission to the end
    std::string error;          // FinishReason::Error: what failed
};

struct SequenceRequest {
    std::vector<int> prompt;  // 1 .. context - 1 ids below the engine's vocabulary
    int max_tokens = 16;      // >= 1, prompt + max_tokens <= context
    TokenPick pick;           // the rule and the logprobs wanted; the scheduler sets each token's coin
    uint64_t seed = 0;
    int stop_token = -1;      // the sequence ends after this token (<|endoftext|>); -1: none
    // Each new token, in order (engine thread); false ends the sequence after it (FinishReason::Stop).
    std::function<bool(const PickedToken&)> on_token;
    // Exactly once for every accepted request, last (engine thread; the scheduler's destructor or shut_down()
    // for what is left then).
    std::function<void(const SequenceEnd&)> on_end;
    // Set by anyone: the sequence leaves at the next step (FinishReason::Cancelled). Optional.
    std::shared_ptr<std::atomic<bool>> cancel;
};

enum class Admission { Accepted, QueueFull, Draining, Invalid };

struct SchedulerOptions {
    int max_queue = 64;        // requests waiting beyond the free slots; more are refused (QueueFull)
    int prefill_budget = 512;  // prompt tokens prefilled per step (>= 1)
    bool prefix_cache = false; // reuse prompt prefixes held in the KV cache (llmc/serving/prefix_cache.h), where the
                               // engine prefills in chunks and copies prefixes
    int prefill_wait = 0;      // steps a whole prompt may wait, while others decode, for more to share its prefill call
                               // (fewer, fuller calls: each costs a forward over the weights); 0: none
    int prefill_wait_rows = 32;  // ... only while at least this many sequences decode (where it was measured to pay)
};

struct SchedulerStats {
    uint64_t steps = 0, decode_steps = 0, decode_rows = 0;  // rows: sequences decoded, summed over decode steps
    uint64_t prefill_calls = 0, prefill_tokens = 0, tokens = 0;
    double decode_ms = 0, deliver_ms = 0;  // in the engine's decode calls (begin, and end's wait); delivering tokens
    double decode_device_ms = 0;           // the decode steps' time on the device (the engine's; 0: not measured)
    uint64_t accepted = 0, finished = 0, cancelled = 0, errors = 0, refused_full = 0;
    int slots = 0, running = 0, queued = 0;
    int64_t positions = 0;  // prompt positions prefilled + tokens generated, over the running sequences (last step)
    uint64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;  // the prefix cache's lookups (none without one)
    bool draining = false;
};
