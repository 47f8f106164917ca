// One completion between the engine's thread and the HTTP handler's: the scheduler's callbacks (on_token, on_end)
// turn tokens into text here (CompletionText: stop strings, whole characters) and record the tokens' logprobs; the
// handler waits for what is new (a stream's next chunk) or for the end (a whole response). Cancelling (the client
// left) marks the request, and the scheduler drops it at its next step. Host-only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "llmc/serving/completion_text.h"
#include "llmc/serving/scheduler.h"

struct TokenRecord {
    int id = 0;
    float logprob = 0.f;
    std::vector<std::pair<int, float>> top;
    size_t text_offset = 0;  // bytes of the completion before this token's
};

struct SessionUpdate {
    std::string text;                 // new text since the last update
    std::vector<TokenRecord> tokens;  // new tokens since the last update (only when logprobs are asked for)
    bool finished = false;
    SequenceEnd end;                  // when finished
};

class CompletionSession : public std::enable_shared_from_this<CompletionSession> {
public:
    // token_bytes: each id's bytes (the tokenizer's table); eot: <|endoftext|>, whose text is never added.
    CompletionSession(const std::vector<std::string>* token_bytes, int eot, std::vector<std::string> stops,
                      bool want_logprobs)
        : tokens_(token_bytes), eot_(eot), text_(std::move(stops)), want_logprobs_(want_logprobs),
          cancel_(std::make_shared<std::atomic<bool>>(false)) {}

    // The scheduler's request for this session (callbacks hold the session alive).
    SequenceRequest request(std::vector<int> prompt, int max_tokens, const TokenPick& pick, uint64_t seed,
                            int stop_token) {
        SequenceRequest r;
        r.prompt = std::move(prompt);
        r.max_tokens = max_tokens;
        r.pick = pick;
        r.seed = seed;
        r.stop_token = stop_token;
        std::shared_ptr<CompletionSession> self = shared_from_this();
        r.on_token = [self](const PickedToken& t) { return self->on_token(t); };
        r.on_end = [self](const SequenceEnd& e) { self->on_end(e); };
        r.cancel = cancel_;
        return r;
    }

    // engine thread: false once a stop string is complete
    bool on_token(const PickedToken& t) {
        bool stopped;
        {
            std::lock_guard<std::mutex> lock(m_);
            const size_t offset = text_.bytes();
            stopped = text_.stopped();
            if (t.token != eot_ && t.token >= 0 && (size_t)t.token < tokens_->size())
                stopped = text_.add((*tokens_)[(size_t)t.token]);
            if (want_logprobs_) pending_.tokens.push_back(TokenRecord{t.token, t.logprob, t.top, offset});
            pending_.text += text_.take();
        }
        cv_.notify_all();  // unlocked: the woken handler does not wait for the engine's thread to let go
        return !stopped;
    }
    void on_end(const SequenceEnd& e) {
        {
            std::lock_guard<std::mutex> lock(m_);
            pending_.text += text_.finish();
            pending_.finished = true;
            pending_.end = e;
        }
        cv_.notify_all();
    }

    // handler thread: what is new, once there is something or after the timeout (then possibly nothing)
    SessionUpdate wait(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait_for(lock, timeout, [&] { return has_news(); });
        return take();
    }
    // handler thread: everything, at the end
    SessionUpdate wait_end() {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return pending_.finished; });
        return take();
    }

    void cancel() { cancel_->store(true); }
    bool cancelled() const { return cancel_->load(); }

private:
    bool has_news() const { return pending_.finished || !pending_.text.empty() || !pending_.tokens.empty(); }
    SessionUpdate take() {  // under m_
        SessionUpdate u = std::move(pending_);
        pending_ = SessionUpdate{};
        if (u.finished) finished_ = true;
        pending_.finished = finished_;
        pending_.end = u.end;
        return u;
    }

    const std::vector<std::string>* tokens_;
    int eot_;
    std::mutex m_;
    std::condition_variable cv_;
    CompletionText text_;
    bool want_logprobs_;
    SessionUpdate pending_;
    bool finished_ = false;
    std::shared_ptr<std::atomic<bool>> cancel_;
};
