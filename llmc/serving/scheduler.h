// Continuous batching over a ServeEngine's slots (llmc/serving/serve_engine.h), engine-agnostic and host-only.
//
// Requests wait in a FIFO queue. A step (1) begins the next decode step where the engine takes two in flight, (2)
// waits for the oldest decode step in flight, (3) drops cancelled requests, queued or running, (4) begins the next
// decode step here where the engine takes one in flight (over every sequence whose prompt is in and whose next token
// may still come), (5) while that runs on the GPU, delivers the tokens of the one it waited for, ending sequences at
// their stop token (<|endoftext|>), at max_tokens, when their request says stop (a stop string, found by the request
// layer in on_token), when cancelled (client gone) or when the engine fails on them, and releasing their slots, (6)
// gives free slots to the oldest waiting requests and (7) prefills prompts within a token budget, oldest first:
// prompts up to the engine's chunk whole (several per call where the engine takes them), longer ones in chunks (an
// engine of whole prompts only gets at most one over-budget prompt per step, alone, so none starves); a prompt's
// first token comes from its prefill, and it joins the next step's decode. A call of whole prompts is begun and
// ended apart, as a decode step is: the engine writes each first token as its slot's next input, so the next step
// takes the slot at once, and the host reads the tokens once a decode step is queued behind the call (step (2)). So
// each running stream gets a token every step whatever joins, and the host's work hides under the GPU's (with two
// steps in flight the GPU does not wait for the host between steps; a chunked prompt's last chunk still waits for
// its first token). A sequence that ends on a token the step before delivers (a stop, or its first token) has a row
// in the step already begun, computed for nothing; one that reaches max_tokens does not. Each request has its own random
// stream: token g is picked with the g-th uniform number of Rng(seed), as generate_gpt2cu draws its coins, so a seed
// and a prompt give the same tokens whatever else is in the batch (the engine's pick depends on the sequence, its
// rule and the coin only).
//
// Threads: submit(), begin_drain(), shut_down() and stats() from any thread; step() and run() on one thread (the
// engine's), where on_token and on_end are called too: they must be quick and must not call back into step().
//   Scheduler s(&engine, options);  std::thread t([&] { s.run(); });
//   s.submit(request);  ...  s.begin_drain();  t.join();   // drain: stop accepting, finish what was accepted
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <climits>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/serving/prefix_cache.h"
#include "llmc/serving/sequence.h"
#include "llmc/serving/serve_engine.h"

class Scheduler {
public:
    Scheduler(ServeEngine* engine, SchedulerOptions options)
        : engine_(engine), opt_(options), slots_(engine->slots()),
          depth_(std::min(2, std::max(1, engine->steps_in_flight()))) {
        opt_.max_queue = std::max(0, opt_.max_queue);
        opt_.prefill_budget = std::max(1, opt_.prefill_budget);
        st_.slots = engine->slots();
        if (opt_.prefix_cache && engine->prefill_chunk() > 0 && engine->copies_prefix())
            cache_ = std::make_unique<PrefixCache>(engine->slots(), engine->prefill_chunk());
    }
    // Whether prompt prefixes are reused (asked for, and the engine can).
    bool prefix_caching() const { return cache_ != nullptr; }
    ~Scheduler() { end_all(); }
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Queues a request; *why says what is wrong with an Invalid one (the request layer checks first).
    Admission submit(SequenceRequest r, std::string* why = nullptr) {
        const std::string problem = check(r);
        if (!problem.empty()) {
            if (why) *why = problem;
            return Admission::Invalid;
        }
        auto s = std::make_unique<Sequence>();
        s->r = std::move(r);
        s->rng = Rng(s->r.seed);
        s->submitted = Clock::now();
        {
            std::lock_guard<std::mutex> lock(m_);
            if (draining_ || shut_) return Admission::Draining;
            const int free_slots = (int)slots_.size() - active_;
            if ((int)queue_.size() >= opt_.max_queue + free_slots) {
                st_.refused_full++;
                return Admission::QueueFull;
            }
            s->order = next_order_++;
            queue_.push_back(std::move(s));
            st_.accepted++;
        }
        cv_.notify_all();
        return Admission::Accepted;
    }

    // One step (see the top of the file); false when there was nothing to do.
    bool step() {
        bool worked = false;
        if (depth_ > 1) worked |= begin_decode();  // queued behind the one in flight: the GPU need not wait for the host
        std::vector<int> collected;
        worked |= collect(&collected);
        for (int slot = 0; slot < (int)slots_.size(); slot++)
            if (slots_[slot] && cancelled(*slots_[slot])) end(slot, FinishReason::Cancelled), worked = true;
        std::vector<std::unique_ptr<Sequence>> dropped;  // cancelled while queued
        {
            std::lock_guard<std::mutex> lock(m_);
            for (auto it = queue_.begin(); it != queue_.end();) {
                if (cancelled(**it)) dropped.push_back(std::move(*it)), it = queue_.erase(it);
                else ++it;
            }
        }
        worked |= !dropped.empty();
        for (auto& s : dropped) finish(s.get(), FinishReason::Cancelled);
        if (!dropped.empty()) cv_.notify_all();  // wait_idle() may be waiting for the queue to empty
        if (depth_ == 1) worked |= begin_decode();
        deliver_collected(collected);
        worked |= admit();
        worked |= prefill_phase();
        const int64_t positions = positions_held();
        step_count_++;
        std::lock_guard<std::mutex> lock(m_);
        st_.steps++;
        st_.positions = positions;
        return worked;
    }

    // Steps until drained (begin_drain: nothing queued or running) or shut down; waits while there is no work.
    void run() {
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(m_);
                const auto idle = [&] { return queue_.empty() && active_ == 0 && flights_.empty() && prefills_.empty(); };
                cv_.wait(lock, [&] { return shut_ || draining_ || !idle(); });
                if (shut_ || (draining_ && idle())) break;
            }
            step();
        }
        end_all();
    }

    // Stop accepting (submit says Draining); run() returns once everything accepted has finished.
    void begin_drain() {
        {
            std::lock_guard<std::mutex> lock(m_);
            draining_ = true;
        }
        cv_.notify_all();
    }
    // Stop now: run() returns after its current step; what is left ends as Cancelled.
    void shut_down() {
        {
            std::lock_guard<std::mutex> lock(m_);
            shut_ = draining_ = true;
        }
        cv_.notify_all();
    }
    // Blocks until nothing is queued or running (after begin_drain, until run() is about to return).
    void wait_idle() {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return queue_.empty() && active_ == 0; });
    }

    SchedulerStats stats() const {
        std::lock_guard<std::mutex> lock(m_);
        SchedulerStats s = st_;
        s.running = active_;
        s.queued = (int)queue_.size();
        s.draining = draining_;
        return s;
    }
    const SchedulerOptions& options() const { return opt_; }
    ServeEngine* engine() const { return engine_; }

private:
    using Clock = std::chrono::steady_clock;
    struct Sequence {
        SequenceRequest r;
        Rng rng;
        int slot = -1;
        int prefilled = 0;  // prompt positions in the slot
        int generated = 0;  // tokens delivered
        bool collected = false;  // the decode step waited for picked `token`, not delivered yet
        int in_flight = 0;  // picks begun and not yet waited for: rows of decode steps, its prefill's first token
        PickedToken token;
        uint64_t order = 0;  // submission order: also tells a slot's sequences apart
        uint64_t admitted_step = 0;  // the scheduler's step when it took a slot (prefill_wait counts from it)
        int picked() const { return generated + collected; }
        Clock::time_point submitted, admitted, first;
    };

    static double ms(Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    }
    static bool cancelled(const Sequence& s) { return s.r.cancel && s.r.cancel->load(); }

    std::string check(const SequenceRequest& r) const {
        const int n = (int)r.prompt.size(), ctx = engine_->context(), V = engine_->vocab_size();
        if (n < 1) return "the prompt is empty";
        if (n >= ctx) return "the prompt is " + std::to_string(n) + " tokens, the context " + std::to_string(ctx);
        for (int id : r.prompt)
            if (id < 0 || id >= V) return "token id " + std::to_string(id) + " is outside the vocabulary";
        if (r.max_tokens < 1 || r.max_tokens > ctx - n)
            return "max_tokens " + std::to_string(r.max_tokens) + " must be in [1, " + std::to_string(ctx - n) + "]";
        if (pick_params_problem(r.pick.params)) return pick_params_problem(r.pick.params);
        return "";
    }

    // The pick of the sequence's next token, with its coin (one per token, in order, greedy or not).
    TokenPick pick_for(Sequence& s) {
        TokenPick p = s.r.pick;
        p.coin = s.rng.uniform();
        return p;
    }

    // Hands a token to the request; false when the sequence has ended (and its slot is released).
    bool deliver(Sequence& s, const PickedToken& t) {
        if (t.token < 0) {
            end(s.slot, FinishReason::Error, "the engine could not pick a token for this sequence");
            return false;
        }
        if (s.generated++ == 0) s.first = Clock::now();
        {
            std::lock_guard<std::mutex> lock(m_);
            st_.tokens++;
        }
        bool keep = true;
        try {
            if (s.r.on_token) keep = s.r.on_token(t);
        } catch (const std::exception& e) {
            end(s.slot, FinishReason::Error, e.what());
            return false;
        }
        if (!keep || t.token == s.r.stop_token) return end(s.slot, FinishReason::Stop), false;
        if (s.generated >= s.r.max_tokens) return end(s.slot, FinishReason::Length), false;
        return true;
    }

    // Prompts within the budget, oldest first. An engine of whole prompts (prefill_chunk() 0) gets them whole; one
    // that takes chunks gets prompts up to a chunk whole (several per call where it takes them) and longer ones in
    // chunks. Whichever kind holds the oldest waiting prompt goes first — the oldest long prompt one chunk, or the
    // short prompts (the oldest even over the budget) — then the other with what the budget leaves, then more chunks;
    // so a prompt waits only behind older ones.
    bool prefill_phase() {
        std::vector<Sequence*> waiting;  // prompts not yet in, oldest first
        for (auto& s : slots_)
            if (s && s->prefilled < (int)s->r.prompt.size()) waiting.push_back(s.get());
        std::sort(waiting.begin(), waiting.end(), [](const Sequence* a, const Sequence* b) { return a->order < b->order; });
        const int chunk = engine_->prefill_chunk();
        long long budget = opt_.prefill_budget;
        if (chunk == 0) return !defer_whole(waiting) && prefill_whole(waiting, &budget, false);
        std::vector<Sequence*> whole;
        std::vector<std::pair<int, uint64_t>> chunked;  // (slot, order): a sequence may end (and be freed) meanwhile
        for (Sequence* s : waiting) {
            if (s->prefilled == 0 && (int)s->r.prompt.size() <= chunk) whole.push_back(s);
            else chunked.emplace_back(s->slot, s->order);
        }
        auto still = [&](const std::pair<int, uint64_t>& c) -> Sequence* {
            Sequence* s = slots_[c.first].get();
            return s && s->order == c.second ? s : nullptr;
        };
        if (defer_whole(whole)) whole.clear();
        const bool long_first = !chunked.empty() && (whole.empty() || chunked.front().second < whole.front()->order);
        bool any = false;
        if (long_first) any |= prefill_chunks(still(chunked.front()), chunk, &budget, 1, true);
        if (budget > 0 || !long_first) any |= prefill_whole(whole, &budget, any);
        for (const auto& c : chunked) {
            if (budget <= 0) break;
            if (Sequence* s = still(c)) any |= prefill_chunks(s, chunk, &budget, INT32_MAX, !any);
        }
        return any;
    }

    // prefill_wait: whole prompts (oldest first) wait for more to fill a prefill call while at least
    // prefill_wait_rows sequences decode, up to prefill_wait steps from the oldest one's admission: each call is a
    // forward over all the weights that holds up every decoding row, so under load fewer, fuller calls leave the GPU
    // more time to decode (and the waiting prompts' first tokens come no later on average); with few rows decoding a
    // call holds up little, slots free too seldom for company to come, and a prompt goes at once.
    bool defer_whole(const std::vector<Sequence*>& whole) const {
        if (opt_.prefill_wait <= 0 || whole.empty() || (int)whole.size() >= engine_->prefill_rows()) return false;
        int decoding = 0;
        for (const auto& s : slots_) decoding += s && s->prefilled == (int)s->r.prompt.size();
        const bool busy = decoding >= std::max(1, opt_.prefill_wait_rows);
        return busy && step_count_ - whole.front()->admitted_step < (uint64_t)opt_.prefill_wait;
    }

    // Up to max_chunks chunks of the sequence's prompt while the budget lasts; its first token comes with the last.
    // With the prefix cache, chunks are whole and chunk-aligned (never cut by the budget: the first may go over it
    // when nothing went before it, first_in_step), so a prefix is computed the same way whatever else runs, and each
    // whole chunk is recorded as held by the slot.
    bool prefill_chunks(Sequence* s, int chunk, long long* budget, int max_chunks, bool first_in_step) {
        const int n = (int)s->r.prompt.size();
        bool any = false;
        for (int c = 0; c < max_chunks && *budget > 0 && s->prefilled < n; c++) {
            int take = (int)std::min<long long>({(long long)(n - s->prefilled), *budget, (long long)chunk});
            if (cache_) {
                take = std::min(n - s->prefilled, chunk - s->prefilled % chunk);
                if (take > *budget && !(first_in_step && c == 0)) break;
            }
            const int start = s->prefilled;
            const bool last = s->prefilled + take == n;
            const TokenPick pick = last ? pick_for(*s) : TokenPick{};
            const int slot = s->slot;
            PickedToken t;
            any = true;
            try {
                t = engine_->prefill(slot, s->r.prompt.data() + s->prefilled, s->prefilled, take, last ? &pick : nullptr);
            } catch (const std::exception& e) {
                if (cache_) cache_->drop(slot);  // what it holds is in doubt
                end(slot, FinishReason::Error, std::string("prefill: ") + e.what());
                break;
            }
            s->prefilled += take;
            *budget -= take;
            if (cache_ && take == chunk && start % chunk == 0)
                cache_->hold(slot, s->r.prompt.data(), (start + take) / chunk, ++tick_);
            {
                std::lock_guard<std::mutex> lock(m_);
                st_.prefill_calls++;
                st_.prefill_tokens += (uint64_t)take;
            }
            if (last) {
                deliver(*s, t);  // may end it (max_tokens 1, a stop) and free the slot: s is gone then
                break;
            }
        }
        return any;
    }

    // Whole prompts: oldest first, calls of up to prefill_rows() prompts while their rows, each as long as the call's
    // longest (the engine pads to it), fit the budget; the oldest goes alone when it alone is over the budget and
    // nothing went before it in this step (went_before), so none starves.
    bool prefill_whole(const std::vector<Sequence*>& waiting, long long* budget_left, bool went_before) {
        const size_t rows = (size_t)std::max(1, engine_->prefill_rows());
        long long& budget = *budget_left;
        bool any = false;
        for (size_t i = 0; i < waiting.size();) {
            std::vector<Sequence*> group;
            long long longest = 0;
            for (; i < waiting.size() && group.size() < rows; i++) {
                const long long l = std::max(longest, (long long)waiting[i]->r.prompt.size());
                if (l * (long long)(group.size() + 1) > budget && (any || went_before || !group.empty())) break;
                group.push_back(waiting[i]);
                longest = l;
            }
            if (group.empty()) break;
            // the engine's prompt picks are busy while its calls are in flight: the oldest ends first where a decode
            // step queued behind it keeps the GPU busy meanwhile, or none is in flight; else the rest waits for the
            // next step, its coins not drawn (ending it would wait for the steps before it too, with none behind it:
            // the stream would drain)
            if ((int)prefills_.size() >= std::max(1, engine_->prefills_in_flight())) {
                if (!flights_.empty() && prefills_.front().before >= decode_begun_) break;
                end_prefill();
            }
            any = true;
            budget -= longest * (long long)group.size();
            std::vector<PrefillPrompt> prompts;
            uint64_t tokens = 0;
            for (Sequence* s : group) {
                prompts.push_back(PrefillPrompt{s->slot, s->r.prompt.data(), (int)s->r.prompt.size(), pick_for(*s)});
                tokens += s->r.prompt.size();
            }
            try {
                engine_->prefill_whole_begin(prompts);
            } catch (const std::exception& e) {
                for (Sequence* s : group) end(s->slot, FinishReason::Error, std::string("prefill: ") + e.what());
                continue;
            }
            {
                std::lock_guard<std::mutex> lock(m_);
                st_.prefill_calls++;
                st_.prefill_tokens += tokens;
            }
            PrefillFlight f{{}, decode_begun_};
            for (Sequence* s : group) {
                s->prefilled = (int)s->r.prompt.size();
                s->in_flight++;  // its first token: the next decode step may take the slot before it is read
                f.rows.push_back(Flight{s->slot, s->order});
            }
            prefills_.push_back(std::move(f));
            if (budget <= 0) break;
        }
        return any;
    }

    // Waits for the oldest prefill call in flight and delivers its first tokens (which may end sequences: max_tokens
    // 1, a stop), but to a cancelled request or at shut-down.
    void end_prefill() {
        const PrefillFlight f = std::move(prefills_.front());
        prefills_.pop_front();
        std::vector<PickedToken> out;
        std::string error;
        try {
            engine_->prefill_whole_end(&out);
            if (out.size() != f.rows.size()) throw std::runtime_error("the engine returned a wrong number of tokens");
        } catch (const std::exception& e) {
            error = std::string("prefill: ") + e.what();
        }
        for (size_t k = 0; k < f.rows.size(); k++) {
            Sequence* s = slots_[f.rows[k].slot].get();
            if (!s || s->order != f.rows[k].order) continue;  // ended meanwhile
            s->in_flight--;
            if (!error.empty()) end(s->slot, FinishReason::Error, error);
            // a cancelled one ends at the step's cancel pass; at shut-down (end_all) tokens are not delivered
            else if (!cancelled(*s) && !ending_) deliver(*s, out[k]);
        }
    }

    // Waits for the oldest decode step in flight; each row whose sequence is still in its slot gets its token
    // (collected, delivered by deliver_collected), and `slots` (if given) those slots in slot order. Prefill calls
    // end here too, in the stream's order: those begun before that step first, then those a later step is queued
    // behind (waiting for them leaves the GPU that step), and all of them when no step is in flight. False when
    // nothing was in flight.
    bool collect(std::vector<int>* slots = nullptr) {
        const uint64_t oldest = decode_begun_ - flights_.size();  // the oldest step's number
        const bool any_prefill = !prefills_.empty();
        while (!prefills_.empty() && (flights_.empty() || prefills_.front().before <= oldest)) end_prefill();
        if (flights_.empty()) return any_prefill;
        const std::vector<Flight> flight = std::move(flights_.front());
        flights_.pop_front();
        std::vector<PickedToken> out;
        const Clock::time_point t0 = Clock::now();
        std::string error;
        try {
            engine_->decode_end(&out);
            if (out.size() != flight.size()) throw std::runtime_error("the engine returned a wrong number of tokens");
        } catch (const std::exception& e) {
            error = std::string("decode: ") + e.what();
        }
        {
            const double device_ms = engine_->decode_device_ms();
            std::lock_guard<std::mutex> lock(m_);
            st_.decode_ms += ms(t0, Clock::now());
            st_.decode_device_ms = device_ms;
        }
        for (size_t i = 0; i < flight.size(); i++) {
            Sequence* s = slots_[flight[i].slot].get();
            if (!s || s->order != flight[i].order) continue;  // ended meanwhile: its row was for nothing
            s->in_flight--;
            if (!error.empty()) end(s->slot, FinishReason::Error, error);
            else if (!s->collected) s->token = out[i], s->collected = true;  // (a later row after a failed token: dropped)
        }
        while (!prefills_.empty() && prefills_.front().before < decode_begun_) end_prefill();
        if (slots)
            for (size_t slot = 0; slot < slots_.size(); slot++)
                if (slots_[slot] && slots_[slot]->collected) slots->push_back((int)slot);
        return true;
    }

    // Begins a decode step, if fewer than the engine's depth are in flight, over every sequence whose prompt is in
    // and whose next token may still come (not one whose collected token failed, nor one whose tokens picked and in
    // flight reach max_tokens). A row's input is the token the engine picks in the sequence's last row before it.
    bool begin_decode() {
        bool begun = false;
        while ((int)flights_.size() < depth_) {
            std::vector<DecodeSlot> batch;
            std::vector<Flight> flight;
            for (auto& s : slots_) {
                if (!s || s->prefilled < (int)s->r.prompt.size() || s->picked() + s->in_flight == 0) continue;
                if ((s->collected && s->token.token < 0) || s->picked() + s->in_flight >= s->r.max_tokens) continue;
                batch.push_back(DecodeSlot{s->slot, (int)s->r.prompt.size() + s->picked() + s->in_flight - 1,
                                           pick_for(*s)});
                flight.push_back(Flight{s->slot, s->order});
            }
            if (batch.empty()) break;
            const Clock::time_point t0 = Clock::now();
            bool ok = true;
            try {
                engine_->decode_begin(batch);
            } catch (const std::exception& e) {
                ok = false;
                for (const DecodeSlot& d : batch) end(d.slot, FinishReason::Error, std::string("decode: ") + e.what());
            }
            if (ok) {
                for (const Flight& f : flight) slots_[f.slot]->in_flight++;
                flights_.push_back(std::move(flight));
                decode_begun_++;
                begun = true;
            }
            std::lock_guard<std::mutex> lock(m_);
            st_.decode_ms += ms(t0, Clock::now());
            if (ok) st_.decode_steps++, st_.decode_rows += batch.size();
            if (!ok) break;
        }
        return begun;
    }

    void deliver_collected(const std::vector<int>& slots) {
        const Clock::time_point t0 = Clock::now();
        for (int slot : slots) {
            Sequence* s = slots_[slot].get();
            if (!s || !s->collected) continue;
            s->collected = false;
            deliver(*s, s->token);
        }
        std::lock_guard<std::mutex> lock(m_);
        st_.deliver_ms += ms(t0, Clock::now());
    }

    // The sequence leaves its slot: the engine forgets it, the request hears why.
    // Prompt positions prefilled + tokens generated over the running sequences (the scheduler's thread).
    int64_t positions_held() const {
        int64_t positions = 0;
        for (const auto& s : slots_)
            if (s) positions += s->prefilled + s->generated;
        return positions;
    }

    void end(int slot, FinishReason why, const std::string& error = "") {
        std::unique_ptr<Sequence> s = std::move(slots_[slot]);
        if (!s) return;
        if (s->prefilled > 0) {  // only a slot the engine has seen: a prompt still waiting for the budget is not there
            try {
                engine_->release(slot, cache_ ? cache_->blocks_held(slot) * cache_->block() : 0);
            } catch (const std::exception&) {  // the engine's complaint ends nothing else
            }
        }
        // the gauges move before the response goes out (finish): a client that reads them after it sees them moved
        const int64_t positions = positions_held();
        {
            std::lock_guard<std::mutex> lock(m_);
            active_--;
            st_.positions = positions;
        }
        finish(s.get(), why, error);
        cv_.notify_all();
    }

    void finish(Sequence* s, FinishReason why, const std::string& error = "") {
        const Clock::time_point now = Clock::now();
        SequenceEnd e;
        e.reason = why;
        e.prompt_tokens = (int)s->r.prompt.size();
        e.completion_tokens = s->generated;
        e.queued_ms = s->slot >= 0 ? ms(s->submitted, s->admitted) : ms(s->submitted, now);
        e.first_token_ms = s->generated ? ms(s->submitted, s->first) : 0.0;
        e.total_ms = ms(s->submitted, now);
        e.error = error;
        {
            std::lock_guard<std::mutex> lock(m_);
            st_.finished++;
            st_.cancelled += why == FinishReason::Cancelled;
            st_.errors += why == FinishReason::Error;
        }
        if (s->r.on_end) {
            try {
                s->r.on_end(e);
            } catch (const std::exception&) {  // a request's failure never stops the others
            }
        }
    }

    // Free slots to the oldest waiting requests. With the prefix cache, a request whose prompt begins with whole blocks
    // a slot holds takes that slot if it is free (nothing to copy), else a free slot that holds nothing, else the one
    // used longest ago, and the held prefix is copied in; its prefill then starts after the prefix.
    bool admit() {
        std::vector<std::pair<int, PrefixCache::Hit>> copies;  // (slot, where its prefix comes from)
        {
            std::lock_guard<std::mutex> lock(m_);
            while (!queue_.empty() && active_ < (int)slots_.size()) {  // no lookup while every slot is busy
                const std::vector<int>& prompt = queue_.front()->r.prompt;
                PrefixCache::Hit hit;
                int slot = -1;
                if (cache_) {
                    hit = cache_->find(prompt.data(), (int)prompt.size(), [&](int s) { return slots_[s] ? 0 : 1; });
                    if (hit.slot >= 0 && !slots_[hit.slot]) slot = hit.slot;
                }
                if (slot < 0) slot = free_slot();
                if (slot < 0) break;
                slots_[slot] = std::move(queue_.front());
                queue_.pop_front();
                slots_[slot]->slot = slot;
                slots_[slot]->admitted = Clock::now();
                slots_[slot]->admitted_step = step_count_;
                active_++;
                if (cache_) {
                    // what the slot will hold once the copy is queued (the next request's lookup must see it)
                    cache_->hold(slot, prompt.data(), hit.blocks, ++tick_);
                    st_.prefix_queried_tokens += prompt.size();
                    st_.prefix_hit_tokens += (uint64_t)hit.blocks * cache_->block();
                    copies.emplace_back(slot, hit);
                }
            }
        }
        for (const auto& [slot, hit] : copies) {
            if (hit.blocks == 0) continue;
            const int n = hit.blocks * cache_->block();
            try {
                engine_->copy_prefix(hit.slot, slot, n);
            } catch (const std::exception& e) {
                cache_->drop(slot);
                end(slot, FinishReason::Error, std::string("prefix copy: ") + e.what());
                continue;
            }
            slots_[slot]->prefilled = n;
        }
        return !copies.empty();
    }
    // A free slot (under m_): the lowest that holds no cached prefix, else the one used longest ago; -1 if none.
    int free_slot() const {
        int best = -1;
        for (int s = 0; s < (int)slots_.size(); s++) {
            if (slots_[s]) continue;
            if (!cache_ || cache_->blocks_held(s) == 0) return s;
            if (best < 0 || cache_->last_used(s) < cache_->last_used(best)) best = s;
        }
        return best;
    }

    // Whatever is left, queued or running, ends as Cancelled.
    void end_all() {
        ending_ = true;
        while (collect()) {  // the engine's steps in flight end before the slots are released (tokens not delivered)
        }
        std::deque<std::unique_ptr<Sequence>> left;
        {
            std::lock_guard<std::mutex> lock(m_);
            left.swap(queue_);
        }
        for (auto& s : left) finish(s.get(), FinishReason::Cancelled);
        for (int slot = 0; slot < (int)slots_.size(); slot++)
            if (slots_[slot]) end(slot, FinishReason::Cancelled);
        cv_.notify_all();
    }

    ServeEngine* engine_;
    std::unique_ptr<PrefixCache> cache_;  // null: no prefix caching (engine thread only)
    uint64_t tick_ = 0;                   // the prefix cache's clock: admissions and filled blocks
    SchedulerOptions opt_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Sequence>> queue_;   // under m_
    std::vector<std::unique_ptr<Sequence>> slots_;  // the engine thread's
    int active_ = 0;                                // occupied slots, under m_
    struct Flight {
        int slot;
        uint64_t order;
    };
    std::deque<std::vector<Flight>> flights_;  // the rows of the decode steps in flight, oldest first
    uint64_t decode_begun_ = 0;                // decode steps begun so far (the oldest in flight: this - flights_.size())
    struct PrefillFlight {
        std::vector<Flight> rows;  // the call's prompts, in its order
        uint64_t before;           // decode steps begun before it: the stream runs it before step number `before`
    };
    std::deque<PrefillFlight> prefills_;  // whole-prompt calls begun, their first tokens not yet read, oldest first
    int depth_ = 1;  // decode steps in flight at most: the engine's steps_in_flight(), 1 or 2
    bool draining_ = false, shut_ = false;
    bool ending_ = false;  // end_all: what the engine still returns is not delivered
    uint64_t next_order_ = 0;
    uint64_t step_count_ = 0;  // the scheduler thread's steps (Sequence::admitted_step)
    SchedulerStats st_;
};
