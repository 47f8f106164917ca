// The serving scheduler (llmc/serving/scheduler.h) on the fake engine (tests/serving/serve_fake_engine.h), on the CPU:
// requests joining and leaving the running batch, slots taken and reused, chunked prefill that leaves running
// streams one token per step, whole-prompt engines and the prefill budget, cancellation (queued and running), queue
// limits, each request's tokens equal to what it gets alone whatever the batch mix, stop tokens and stop callbacks,
// engine failures, and the drain (stop accepting, finish in-flight).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/serving/scheduler.h"
#include "tests/serving/scheduler_fixture.h"

namespace {

using namespace scheduler_test;

TEST(ServeScheduler, AloneMatchesTheEngineRule) {
    FakeEngine e({/*slots*/ 2, /*context*/ 64});
    Scheduler s(&e, {});
    auto out = std::make_shared<Outcome>();
    const std::vector<int> p = prompt_of(5, 1);
    ASSERT_EQ(s.submit(make_request(p, 20, out)), Admission::Accepted);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    EXPECT_EQ(out->tokens, e.alone(p, 20, {}, 0));
    EXPECT_EQ(out->ends, 1);
    EXPECT_EQ(out->end.reason, FinishReason::Length);
    EXPECT_EQ(out->end.completion_tokens, 20);
    EXPECT_EQ(out->end.prompt_tokens, 5);
    EXPECT_EQ(e.steps.size(), 19u);  // the first token comes from the prefill
    EXPECT_EQ(e.released, std::vector<int>{0});
}

TEST(ServeScheduler, JoinAtTheNextStepLeaveAtTheEndAndReuseSlots) {
    FakeEngine e({2, 128});
    Scheduler s(&e, {});
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    const std::vector<int> pa = prompt_of(6, 1), pb = prompt_of(3, 2), pc = prompt_of(9, 3);
    s.submit(make_request(pa, 30, a));
    s.submit(make_request(pb, 4, b));
    s.submit(make_request(pc, 5, c));  // waits: two slots
    s.step();  // a and b prefilled (begun: their first tokens are read at the next step)
    EXPECT_EQ(s.stats().running, 2);
    EXPECT_EQ(s.stats().queued, 1);
    EXPECT_TRUE(e.steps.empty());
    EXPECT_TRUE(a->tokens.empty());
    s.step();  // their first tokens; their first decode step begins, its tokens come with the next step
    EXPECT_EQ(e.steps.back(), (std::vector<int>{0, 1}));
    EXPECT_EQ(a->tokens.size(), 1u);
    s.step();
    s.step();
    EXPECT_EQ(a->tokens.size(), 3u);
    const size_t before = e.prefills.size();
    s.step();  // b's 4th token (1 from the prefill + 3 decode steps) ends it; c takes slot 1 and is prefilled
    EXPECT_EQ(b->ends, 1);
    EXPECT_EQ(e.released, std::vector<int>{1});
    EXPECT_EQ(e.steps.back(), (std::vector<int>{0}));  // begun before b's end: without b, at max_tokens
    ASSERT_EQ(e.prefills.size(), before + 1);
    EXPECT_EQ(e.prefills.back().slot, 1);
    EXPECT_EQ(e.prefills.back().start, 0);
    s.step();  // c joins the next step
    EXPECT_EQ(e.steps.back(), (std::vector<int>{0, 1}));
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty());
    EXPECT_EQ(a->tokens, e.alone(pa, 30, {}, 0));
    EXPECT_EQ(b->tokens, e.alone(pb, 4, {}, 0));
    EXPECT_EQ(c->tokens, e.alone(pc, 5, {}, 0));
    // a ran every step from the first to its end
    int a_steps = 0;
    for (const auto& st : e.steps) a_steps += std::count(st.begin(), st.end(), 0);
    EXPECT_EQ(a_steps, 29);
}

// A request's tokens do not depend on what runs beside it: random prompts, lengths, rules, seeds and arrival times,
// against each request alone; whole prompts one per call, in chunks, and several per call with stop tokens (so that
// sequences end while the next step is in flight and their slots are prefilled again under it).
TEST(ServeScheduler, TokensIndependentOfTheBatchMix) {
    for (int run = 0; run < 12; run++) {
        // depth: decode steps in flight at once; prefills: whole-prompt calls in flight at once
        const int mode = run % 3, depth = 1 + run / 3 % 2, prefills = 1 + run / 6;
        const int chunk = mode == 1 ? 8 : 0, stop = mode == 2 ? 999 : -1;
        FakeEngineOptions fo{5, 96, 1000, chunk, /*prefill_rows*/ mode == 2 ? 3 : 1};
        if (mode == 2) fo.eot = stop, fo.eot_every = 9;
        fo.in_flight = depth, fo.prefills_in_flight = prefills;
        FakeEngine e(fo);
        SchedulerOptions o;
        o.max_queue = 100;
        o.prefill_budget = mode == 2 ? 64 : 16;
        Scheduler s(&e, o);
        Rng rng(42 + mode);
        std::vector<Job> jobs;
        for (int i = 0; i < 40; i++) {
            Job j;
            j.prompt = prompt_of(1 + (int)(rng.next_u32() % 40), i);
            j.max_tokens = 1 + (int)(rng.next_u32() % 30);
            j.arrive = (int)(rng.next_u32() % 60);
            if (rng.next_u32() % 2) j.pick.params = PickParams{0.2f + rng.uniform(), (int)(rng.next_u32() % 50), 0.5f + 0.5f * rng.uniform()};
            j.seed = rng.next_u64();
            j.out = std::make_shared<Outcome>();
            jobs.push_back(j);
        }
        for (int t = 0; t < 2000; t++) {
            for (Job& j : jobs)
                if (j.arrive == t) {
                    ASSERT_EQ(s.submit(make_request(j.prompt, j.max_tokens, j.out, j.pick, j.seed, stop)),
                              Admission::Accepted);
                }
            s.step();
        }
        EXPECT_TRUE(e.violations.empty()) << e.violations.front();
        int sampled_differs = 0, stops = 0;
        for (const Job& j : jobs) {
            const std::vector<int> alone = e.alone(j.prompt, j.max_tokens, j.pick, j.seed, stop);
            EXPECT_EQ(j.out->ends, 1);
            EXPECT_EQ(j.out->end.reason, alone.back() == stop ? FinishReason::Stop : FinishReason::Length);
            EXPECT_EQ(j.out->tokens, alone) << "mode " << mode << ", depth " << depth << ", prefills " << prefills;
            stops += alone.back() == stop && (int)alone.size() < j.max_tokens;
            if (!j.pick.params.greedy() && j.max_tokens > 3)
                sampled_differs += e.alone(j.prompt, j.max_tokens, j.pick, j.seed + 1) != j.out->tokens;
        }
        EXPECT_GT(sampled_differs, 0);  // the seed matters: the comparison above could fail
        EXPECT_GT(s.stats().decode_rows, s.stats().decode_steps);  // sequences did share steps
        EXPECT_EQ(e.draining_prefill_ends, 0) << "a prefill call read with no decode step behind it";
        if (mode == 2) {  // the cases the mode is for did come
            EXPECT_GE(stops, 5);
            EXPECT_GT(*std::max_element(e.whole_calls.begin(), e.whole_calls.end()), 1);
        }
    }
}

// Cancellations at random moments — queued, prefilled, with a step in flight — beside stops and sequences that run
// to max_tokens, several prompts per prefill call: every request ends exactly once, a cancelled one with a prefix of
// its tokens alone, the others with all of them; the engine sees no protocol violation and every slot comes back.
TEST(ServeScheduler, CancellationsAtRandomMomentsLeaveNothingBehind) {
    for (int depth : {1, 2}) {
        SCOPED_TRACE("decode steps in flight: " + std::to_string(depth));
        FakeEngineOptions fo{4, 96, 1000, 0, /*prefill_rows*/ 3};
        fo.eot = 999, fo.eot_every = 11, fo.in_flight = depth;
        FakeEngine e(fo);
        SchedulerOptions o;
        o.max_queue = 100;
        o.prefill_budget = 48;
        Scheduler s(&e, o);
        Rng rng(7);
        struct Job {
            std::vector<int> prompt;
            int max_tokens, arrive, cancel_at;  // cancel_at < 0: never
            SequenceRequest r;
            std::shared_ptr<Outcome> out;
        };
        std::vector<Job> jobs(60);
        for (int i = 0; i < (int)jobs.size(); i++) {
            Job& j = jobs[i];
            j.prompt = prompt_of(1 + (int)(rng.next_u32() % 30), 100 + i);
            j.max_tokens = 1 + (int)(rng.next_u32() % 25);
            j.arrive = (int)(rng.next_u32() % 80);
            j.cancel_at = rng.next_u32() % 2 ? j.arrive + (int)(rng.next_u32() % 20) : -1;
            j.out = std::make_shared<Outcome>();
            j.r = make_request(j.prompt, j.max_tokens, j.out, {}, 0, 999);
        }
        std::vector<std::shared_ptr<std::atomic<bool>>> cancels;
        for (Job& j : jobs) cancels.push_back(j.r.cancel);
        for (int t = 0; t < 1000; t++) {
            for (size_t i = 0; i < jobs.size(); i++) {
                if (jobs[i].arrive == t) {
                    ASSERT_EQ(s.submit(std::move(jobs[i].r)), Admission::Accepted);
                }
                if (jobs[i].cancel_at == t) cancels[i]->store(true);
            }
            s.step();
        }
        EXPECT_TRUE(e.violations.empty()) << e.violations.front();
        int cancelled = 0, whole = 0;
        for (const Job& j : jobs) {
            const std::vector<int> alone = e.alone(j.prompt, j.max_tokens, {}, 0, 999);
            ASSERT_EQ(j.out->ends, 1);
            if (j.out->end.reason == FinishReason::Cancelled) {
                cancelled++;
                ASSERT_LE(j.out->tokens.size(), alone.size());
                EXPECT_TRUE(std::equal(j.out->tokens.begin(), j.out->tokens.end(), alone.begin()));
            } else {
                whole++;
                EXPECT_EQ(j.out->tokens, alone);
            }
        }
        EXPECT_GE(cancelled, 10);  // both kinds came
        EXPECT_GE(whole, 10);
        EXPECT_EQ(s.stats().running, 0);
        EXPECT_EQ(s.stats().queued, 0);
        int prefilled_sequences = 0;  // every sequence the engine saw is released once, and no other
        for (const FakePrefill& p : e.prefills) prefilled_sequences += p.start == 0;
        EXPECT_EQ((int)e.released.size(), prefilled_sequences);
    }
}

// A request that has a slot but whose prompt waits for the budget, cancelled: it leaves, and the engine, which never
// saw it, is not told to release that slot.
TEST(ServeScheduler, CancelledBeforeItsPrefillReleasesNothing) {
    FakeEngine e({2, 64});
    SchedulerOptions o;
    o.prefill_budget = 10;
    Scheduler s(&e, o);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    SequenceRequest rb = make_request(prompt_of(8, 2), 5, b);
    auto cancel_b = rb.cancel;
    s.submit(make_request(prompt_of(8, 1), 5, a));
    s.submit(std::move(rb));
    s.step();  // both take slots; only a's prompt fits the budget
    ASSERT_EQ(e.prefills.size(), 1u);
    EXPECT_EQ(s.stats().running, 2);
    cancel_b->store(true);
    s.step();
    EXPECT_EQ(b->ends, 1);
    EXPECT_EQ(b->end.reason, FinishReason::Cancelled);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    EXPECT_EQ(e.released, std::vector<int>{0});
    EXPECT_EQ(a->tokens, e.alone(prompt_of(8, 1), 5, {}, 0));
}

// A long prompt's prefill in chunks, interleaved: the running stream gets a token every step meanwhile.
TEST(ServeScheduler, ChunkedPrefillKeepsRunningStreamsAtPace) {
    FakeEngine e({2, 2048, 1000, /*chunk*/ 100});  // the budget (64) is the smaller
    SchedulerOptions o;
    o.prefill_budget = 64;
    Scheduler s(&e, o);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(prompt_of(4, 1), 300, a));
    for (int i = 0; i < 3; i++) s.step();  // the prefill's token, then each step delivers the one begun before
    ASSERT_EQ(a->tokens.size(), 2u);
    s.submit(make_request(prompt_of(1000, 2), 10, b));
    int steps = 0;
    while (b->tokens.empty()) {
        const size_t before = a->tokens.size();
        const long long prefilled = e.prefilled_tokens;
        s.step();
        steps++;
        EXPECT_EQ(a->tokens.size(), before + 1) << "step " << steps;
        EXPECT_LE(e.prefilled_tokens - prefilled, 64);
        ASSERT_LT(steps, 100);
    }
    EXPECT_EQ(steps, 16);  // ceil(1000 / 64)
    int calls = 0;
    for (const FakePrefill& p : e.prefills)
        if (p.slot == 1) {
            EXPECT_EQ(p.start, 64 * calls++);
        }
    EXPECT_EQ(calls, 16);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty());
    EXPECT_EQ(b->tokens, e.alone(prompt_of(1000, 2), 10, {}, 0));
}

// A budget of several chunks: a long prompt takes several chunks a step, and the next prompt what is left of it.
TEST(ServeScheduler, ChunksPerStepFillTheBudget) {
    FakeEngine e({3, 2048, 1000, /*chunk*/ 64});
    SchedulerOptions o;
    o.prefill_budget = 256;
    Scheduler s(&e, o);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(prompt_of(1000, 1), 5, a));
    s.submit(make_request(prompt_of(100, 2), 5, b));
    std::vector<long long> per_step;
    while (a->tokens.empty() || b->tokens.empty()) {
        const long long before = e.prefilled_tokens;
        s.step();
        per_step.push_back(e.prefilled_tokens - before);
        ASSERT_LT(per_step.size(), 20u);
    }
    // a: 256 a step for three steps, then 232 with b's first 24; then b's last 76
    EXPECT_EQ(per_step, (std::vector<long long>{256, 256, 256, 256, 76}));
    EXPECT_EQ(e.prefills[3].n, 64);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty());
    EXPECT_EQ(a->tokens, e.alone(prompt_of(1000, 1), 5, {}, 0));
    EXPECT_EQ(b->tokens, e.alone(prompt_of(100, 2), 5, {}, 0));
}

// An engine that takes both: prompts up to a chunk whole, several per call; a longer one in chunks, its first chunk
// before the short prompts in each step (so they never starve it), then what the budget leaves.
TEST(ServeScheduler, ShortPromptsWholeLongOnesInChunks) {
    FakeEngineOptions fo{8, 1024, 1000, /*chunk*/ 32, /*prefill_rows*/ 4};
    FakeEngine e(fo);
    SchedulerOptions o;
    o.prefill_budget = 96;
    Scheduler s(&e, o);
    const std::vector<int> lengths = {200, 10, 20, 30, 12, 8};
    std::vector<std::shared_ptr<Outcome>> outs;
    for (size_t i = 0; i < lengths.size(); i++) {
        outs.push_back(std::make_shared<Outcome>());
        s.submit(make_request(prompt_of(lengths[i], (int)i), 6, outs.back()));
    }
    s.step();  // the long one's first chunk (32); 10 and 20 together (2 rows of 20); 30 does not fit the 24 left;
               // the long one's next 24
    ASSERT_EQ(e.prefills.size(), 4u);
    EXPECT_EQ(e.prefills[0].slot, 0);
    EXPECT_EQ(e.prefills[0].n, 32);
    EXPECT_FALSE(e.prefills[0].last);
    EXPECT_EQ(e.whole_calls, std::vector<int>{2});
    EXPECT_EQ(e.prefills[3].start, 32);
    EXPECT_EQ(e.prefills[3].n, 24);
    s.step();  // a chunk (32); 30, 12, 8 together (3 rows of 30: 90 > 64 left) -> 30 and 12 (60); the long one 4
    EXPECT_EQ(e.whole_calls, (std::vector<int>{2, 2}));
    for (int i = 0; i < 10 && outs[0]->tokens.empty(); i++) s.step();
    EXPECT_EQ(outs[0]->tokens.size(), 1u);  // the long one's first token came with its last chunk
    run_to_idle(s);
    for (size_t i = 0; i < lengths.size(); i++)
        EXPECT_EQ(outs[i]->tokens, e.alone(prompt_of(lengths[i], (int)i), 6, {}, 0)) << i;
    int whole_calls_total = 0;
    for (int n : e.whole_calls) whole_calls_total += n;
    EXPECT_EQ(whole_calls_total, 5);  // every short prompt whole, the long one never
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// Whichever kind holds the oldest prompt goes first: an older short prompt before a long one's chunk (even over the
// budget, alone); a younger one only within what the long one's chunk leaves.
TEST(ServeScheduler, OlderPromptsFirstWhateverTheirKind) {
    FakeEngineOptions fo{4, 1024, 1000, /*chunk*/ 32, /*prefill_rows*/ 4};
    FakeEngine e(fo);
    SchedulerOptions o;
    o.prefill_budget = 40;
    Scheduler s(&e, o);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    s.submit(make_request(prompt_of(30, 1), 4, a));   // short, oldest, within a chunk but not with a chunk beside it
    s.submit(make_request(prompt_of(200, 2), 4, b));  // long
    s.submit(make_request(prompt_of(12, 3), 4, c));   // short, youngest
    s.step();  // a first (30 whole); c's 12 > the 10 left; b's chunk with them
    ASSERT_EQ(e.prefills.size(), 2u);
    EXPECT_EQ(e.prefills[0].n, 30);
    EXPECT_EQ(e.prefills[1].slot, 1);
    EXPECT_EQ(e.prefills[1].n, 10);
    s.step();  // b (older than c) first: 32; c's 12 > the 8 left; b 8 more
    ASSERT_EQ(e.prefills.size(), 4u);
    EXPECT_EQ(e.prefills[2].n, 32);
    EXPECT_EQ(e.prefills[3].slot, 1);
    EXPECT_EQ(e.prefills[3].n, 8);
    run_to_idle(s);
    EXPECT_EQ(a->tokens, e.alone(prompt_of(30, 1), 4, {}, 0));
    EXPECT_EQ(b->tokens, e.alone(prompt_of(200, 2), 4, {}, 0));
    EXPECT_EQ(c->tokens, e.alone(prompt_of(12, 3), 4, {}, 0));
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// A long prompt's last chunk that ends its sequence (max_tokens 1) first in a step, then more chunks of another: the
// ended one is not touched again.
TEST(ServeScheduler, ASequenceEndedByItsLastChunkIsLeftAlone) {
    FakeEngineOptions fo{3, 1024, 1000, /*chunk*/ 16, /*prefill_rows*/ 2};
    FakeEngine e(fo);
    SchedulerOptions o;
    o.prefill_budget = 64;
    Scheduler s(&e, o);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(prompt_of(64 + 10, 1), 1, a));  // 64 in the first step, its last 10 first in the second
    s.submit(make_request(prompt_of(100, 2), 3, b));
    run_to_idle(s);
    EXPECT_EQ(a->ends, 1);
    EXPECT_EQ(a->end.reason, FinishReason::Length);
    EXPECT_EQ(a->tokens, e.alone(prompt_of(74, 1), 1, {}, 0));
    ASSERT_GE(e.prefills.size(), 7u);  // a: 16, 16, 16, 16; then its last 10 first in the second step, b's after
    EXPECT_EQ(e.prefills[4].slot, 0);
    EXPECT_EQ(e.prefills[4].n, 10);
    EXPECT_TRUE(e.prefills[4].last);
    EXPECT_EQ(e.prefills[5].slot, 1);
    EXPECT_EQ(b->tokens, e.alone(prompt_of(100, 2), 3, {}, 0));
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// The engine failing with the next step already queued (two in flight): decode_begin of the second step, or
// decode_end of a step with another behind it. The sequences of that step end with an error, exactly once; the step
// behind holds rows for nothing; later requests run as alone.
TEST(ServeScheduler, EngineFailuresWithTwoStepsInFlight) {
    for (int which : {0, 1}) {
        SCOPED_TRACE(which ? "decode_end fails" : "decode_begin fails");
        FakeEngineOptions fo{2, 128};
        fo.in_flight = 2;
        (which ? fo.fail_end_at : fo.fail_begin_at) = 3;
        FakeEngine e(fo);
        Scheduler s(&e, {});
        auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
        s.submit(make_request(prompt_of(5, 1), 20, a));
        s.submit(make_request(prompt_of(6, 2), 20, b));
        run_to_idle(s);
        for (const auto& o : {a, b}) {
            EXPECT_EQ(o->ends, 1);
            EXPECT_EQ(o->end.reason, FinishReason::Error);
            EXPECT_NE(o->end.error.find("injected"), std::string::npos) << o->end.error;
            EXPECT_LT(o->tokens.size(), 20u);
        }
        s.submit(make_request(prompt_of(7, 3), 12, c));
        run_to_idle(s);
        EXPECT_EQ(c->ends, 1);
        EXPECT_EQ(c->tokens, e.alone(prompt_of(7, 3), 12, {}, 0));
        EXPECT_EQ(s.stats().errors, 2u);
        EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    }
}

// An engine that takes prompts only whole: within the budget, several per step; an over-budget one alone.
TEST(ServeScheduler, WholePromptsWithinTheBudget) {
    FakeEngine e({4, 2048, 1000, /*chunk*/ 0});
    SchedulerOptions o;
    o.prefill_budget = 64;
    Scheduler s(&e, o);
    std::vector<std::shared_ptr<Outcome>> outs;
    for (int n : {40, 40, 1000, 20}) {
        outs.push_back(std::make_shared<Outcome>());
        s.submit(make_request(prompt_of(n, n), 3, outs.back()));
    }
    std::vector<size_t> per_step;
    for (int i = 0; i < 4; i++) {
        const size_t before = e.prefills.size();
        s.step();
        per_step.push_back(e.prefills.size() - before);
    }
    // step 1: 40 (40 + 40 > 64); step 2: 40 (then 1000 does not fit); step 3: 1000 alone (first); step 4: 20
    EXPECT_EQ(per_step, (std::vector<size_t>{1, 1, 1, 1}));
    EXPECT_EQ(e.prefills[2].n, 1000);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty());
}

// Several whole prompts per call where the engine takes them: as many as fit the budget counted as rows of the
// call's longest, up to the engine's rows; then the next call in the same step with what is left of the budget.
TEST(ServeScheduler, WholePromptsTogetherPaddedToTheLongest) {
    FakeEngineOptions fo{8, 2048, 1000, 0, /*prefill_rows*/ 3};
    FakeEngine e(fo);
    SchedulerOptions o;
    o.prefill_budget = 256;
    Scheduler s(&e, o);
    std::vector<std::shared_ptr<Outcome>> outs;
    const std::vector<int> lengths = {40, 40, 30, 20, 100, 20, 10, 300};
    for (size_t i = 0; i < lengths.size(); i++) {
        outs.push_back(std::make_shared<Outcome>());
        s.submit(make_request(prompt_of(lengths[i], (int)i), 3, outs.back()));
    }
    s.step();  // 40, 40, 30 (3 rows of 40: 120 of 256); 20 (100 beside it: 2 x 100 > 136); 100 alone (of 116)
    EXPECT_EQ(e.whole_calls, (std::vector<int>{3, 1, 1}));
    s.step();  // 20, 10 (2 x 20); 300 does not fit the 216 left
    EXPECT_EQ(e.whole_calls, (std::vector<int>{3, 1, 1, 2}));
    s.step();  // 300: over the budget, first in its step, alone
    EXPECT_EQ(e.whole_calls, (std::vector<int>{3, 1, 1, 2, 1}));
    run_to_idle(s);
    for (size_t i = 0; i < lengths.size(); i++)
        EXPECT_EQ(outs[i]->tokens, e.alone(prompt_of(lengths[i], (int)i), 3, {}, 0)) << i;
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// prefill_wait: while at least prefill_wait_rows sequences decode, short prompts wait up to that many steps from the
// oldest one's admission for enough to fill a prefill call (prefill_rows), then go together; with fewer decoding they
// never wait; every request's tokens as alone.
TEST(ServeScheduler, PrefillWaitFillsTheCallWhileOthersDecode) {
    for (int chunk : {0, 32}) {  // whole prompts only, and prompts up to a chunk whole beside chunked ones
        FakeEngineOptions fo{8, 512, 1000, chunk, /*prefill_rows*/ 3};
        FakeEngine e(fo);
        SchedulerOptions o;
        o.prefill_wait = 4, o.prefill_wait_rows = 4;
        Scheduler s(&e, o);
        std::vector<std::shared_ptr<Outcome>> firsts;
        std::vector<std::vector<int>> first_prompts;
        for (int i = 0; i < 4; i++) {  // prefill_wait_rows sequences, decoding from the next step on
            firsts.push_back(std::make_shared<Outcome>());
            first_prompts.push_back(prompt_of(10 + i, 100 + i));
            s.submit(make_request(first_prompts.back(), 40, firsts.back()));
        }
        s.step();  // nothing decodes yet: prefilled at once, 3 and 1 (their first tokens read at the next step)
        ASSERT_EQ(e.whole_calls, (std::vector<int>{3, 1})) << chunk;
        const size_t calls0 = e.whole_calls.size();  // prefill_whole calls (every prompt here is whole)
        std::vector<std::shared_ptr<Outcome>> outs;
        std::vector<std::vector<int>> prompts;
        auto submit = [&](int n) {
            outs.push_back(std::make_shared<Outcome>());
            prompts.push_back(prompt_of(n, (int)prompts.size()));
            s.submit(make_request(prompts.back(), 5, outs.back()));
        };
        submit(12);
        s.step();  // admitted at this step: waits (1 of 3 rows)
        s.step();
        EXPECT_EQ(e.whole_calls.size(), calls0) << chunk;
        submit(8);
        submit(9);
        s.step();  // three wait: the call is full, all three go together
        ASSERT_EQ(e.whole_calls.size(), calls0 + 1) << chunk;
        EXPECT_EQ(e.whole_calls.back(), 3) << chunk;
        submit(7);
        for (int i = 0; i < 4; i++) s.step();  // alone: waits the 4 steps from its admission
        EXPECT_EQ(e.whole_calls.size(), calls0 + 1) << chunk;
        s.step();
        ASSERT_EQ(e.whole_calls.size(), calls0 + 2) << chunk;
        EXPECT_EQ(e.whole_calls.back(), 1) << chunk;
        run_to_idle(s);
        EXPECT_TRUE(e.violations.empty()) << e.violations.front();
        for (size_t i = 0; i < firsts.size(); i++) EXPECT_EQ(firsts[i]->tokens, e.alone(first_prompts[i], 40, {}, 0)) << i;
        for (size_t i = 0; i < outs.size(); i++) EXPECT_EQ(outs[i]->tokens, e.alone(prompts[i], 5, {}, 0)) << i;
    }
}

// ... and with fewer decoding, a short prompt goes at the first step it can (a light load's time to first token is not
// traded for fuller calls).
TEST(ServeScheduler, PrefillWaitNotUnderLightLoad) {
    FakeEngine e({8, 512, 1000, 0, /*prefill_rows*/ 3});
    SchedulerOptions o;
    o.prefill_wait = 16, o.prefill_wait_rows = 2;
    Scheduler s(&e, o);
    auto first = std::make_shared<Outcome>(), second = std::make_shared<Outcome>();
    const std::vector<int> p0 = prompt_of(10, 1), p1 = prompt_of(12, 2);
    s.submit(make_request(p0, 40, first));
    s.step();
    s.step();  // 1 sequence decoding, under prefill_wait_rows
    ASSERT_EQ(e.whole_calls.size(), 1u);
    s.submit(make_request(p1, 5, second));
    s.step();  // admitted and prefilled in the same step, alone
    ASSERT_EQ(e.whole_calls, (std::vector<int>{1, 1}));
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    EXPECT_EQ(first->tokens, e.alone(p0, 40, {}, 0));
    EXPECT_EQ(second->tokens, e.alone(p1, 5, {}, 0));
}

TEST(ServeScheduler, CancelRunningAndQueued) {
    FakeEngine e({1, 128});
    Scheduler s(&e, {});
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    SequenceRequest ra = make_request(prompt_of(5, 1), 50, a), rb = make_request(prompt_of(7, 2), 50, b);
    auto cancel_a = ra.cancel, cancel_b = rb.cancel;
    s.submit(std::move(ra));
    s.submit(std::move(rb));
    s.submit(make_request(prompt_of(3, 3), 4, c));
    for (int i = 0; i < 7; i++) s.step();  // the prefill's token, a decode step begun, then one token a step
    ASSERT_EQ(a->tokens.size(), 6u);
    cancel_a->store(true);
    cancel_b->store(true);  // still queued: never prefilled
    s.step();               // a leaves (the token its last step picked is dropped), c takes the slot
    EXPECT_EQ(a->ends, 1);
    EXPECT_EQ(a->end.reason, FinishReason::Cancelled);
    EXPECT_EQ(a->end.completion_tokens, 6);
    EXPECT_EQ(a->tokens.size(), 6u);
    EXPECT_EQ(b->ends, 1);
    EXPECT_EQ(b->end.reason, FinishReason::Cancelled);
    EXPECT_TRUE(b->tokens.empty());
    run_to_idle(s);
    for (const FakePrefill& p : e.prefills) EXPECT_NE(p.n, 7);  // b's prompt never reached the engine
    EXPECT_EQ(c->tokens, e.alone(prompt_of(3, 3), 4, {}, 0));
    EXPECT_EQ(s.stats().cancelled, 2u);
    EXPECT_TRUE(e.violations.empty());
}

TEST(ServeScheduler, QueueLimit) {
    FakeEngine e({2, 64});
    SchedulerOptions o;
    o.max_queue = 3;
    Scheduler s(&e, o);
    std::vector<std::shared_ptr<Outcome>> outs;
    auto submit = [&] {
        outs.push_back(std::make_shared<Outcome>());
        return s.submit(make_request(prompt_of(4, (int)outs.size()), 5, outs.back()));
    };
    for (int i = 0; i < 5; i++) EXPECT_EQ(submit(), Admission::Accepted) << i;  // 2 free slots + 3 waiting
    EXPECT_EQ(submit(), Admission::QueueFull);
    s.step();
    EXPECT_EQ(s.stats().queued, 3);
    EXPECT_EQ(submit(), Admission::QueueFull);
    EXPECT_EQ(s.stats().refused_full, 2u);
    run_to_idle(s);
    EXPECT_EQ(submit(), Admission::Accepted);
    run_to_idle(s);
    for (size_t i = 0; i < outs.size(); i++)
        if (i != 5 && i != 6) {
            EXPECT_EQ(outs[i]->ends, 1) << i;
        }
    EXPECT_EQ(outs[5]->ends, 0);  // refused: never queued, never ended
}

TEST(ServeScheduler, InvalidRequests) {
    FakeEngine e({2, 64, 1000});
    Scheduler s(&e, {});
    auto out = std::make_shared<Outcome>();
    std::string why;
    EXPECT_EQ(s.submit(make_request({}, 5, out), &why), Admission::Invalid);
    EXPECT_NE(why.find("empty"), std::string::npos);
    EXPECT_EQ(s.submit(make_request(prompt_of(64, 1), 1, out), &why), Admission::Invalid);
    EXPECT_EQ(s.submit(make_request({1, 1000}, 5, out), &why), Admission::Invalid);
    EXPECT_NE(why.find("1000"), std::string::npos);
    EXPECT_EQ(s.submit(make_request({1, 2}, 0, out), &why), Admission::Invalid);
    EXPECT_EQ(s.submit(make_request(prompt_of(60, 1), 5, out), &why), Admission::Invalid);
    EXPECT_EQ(s.submit(make_request(prompt_of(60, 1), 4, out), &why), Admission::Accepted);  // 60 + 4 = 64
    run_to_idle(s);
    EXPECT_EQ(out->tokens.size(), 4u);
    EXPECT_TRUE(e.violations.empty());
}

TEST(ServeScheduler, StopTokenStopCallbackAndOneToken) {
    FakeEngine e({3, 128});
    Scheduler s(&e, {});
    const std::vector<int> p = prompt_of(8, 5);
    const std::vector<int> alone = e.alone(p, 10, {}, 0);
    const int stop = alone[3];
    ASSERT_EQ(std::find(alone.begin(), alone.begin() + 3, stop), alone.begin() + 3) << "pick another prompt";
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    b->stop_after = 2;
    s.submit(make_request(p, 10, a, {}, 0, stop));
    s.submit(make_request(p, 10, b));
    s.submit(make_request(p, 1, c));
    run_to_idle(s);
    EXPECT_EQ(a->tokens, std::vector<int>(alone.begin(), alone.begin() + 4));
    EXPECT_EQ(a->end.reason, FinishReason::Stop);
    EXPECT_EQ(a->end.completion_tokens, 4);
    EXPECT_EQ(b->tokens.size(), 2u);
    EXPECT_EQ(b->end.reason, FinishReason::Stop);
    EXPECT_EQ(c->tokens, std::vector<int>{alone[0]});
    EXPECT_EQ(c->end.reason, FinishReason::Length);
    for (const auto& st : e.steps) EXPECT_EQ(std::count(st.begin(), st.end(), 2), 0);  // c never decoded
    EXPECT_TRUE(e.violations.empty());
}

// A decode step is begun before the tokens of the one before are delivered: a sequence that stops on such a token
// has one row more computed for nothing, and its slot, given to the next request in the same step, is prefilled
// while that row is in flight; the row's token is dropped and the next sequence is as it would be alone.
TEST(ServeScheduler, StopWhileTheNextStepIsInFlight) {
    FakeEngine e({1, 128});
    Scheduler s(&e, {});
    const std::vector<int> pa = prompt_of(8, 5), pb = prompt_of(6, 9);
    const std::vector<int> alone = e.alone(pa, 10, {}, 0);
    const int stop = alone[3];
    ASSERT_EQ(std::find(alone.begin(), alone.begin() + 3, stop), alone.begin() + 3) << "pick another prompt";
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(pa, 10, a, {}, 0, stop));
    s.submit(make_request(pb, 5, b));
    for (int i = 0; i < 5; i++) s.step();  // a: prefill, 3 steps begun; its 4th token (the stop) delivered in the 5th
    EXPECT_EQ(a->tokens, std::vector<int>(alone.begin(), alone.begin() + 4));
    EXPECT_EQ(a->end.reason, FinishReason::Stop);
    ASSERT_EQ(e.prefills.size(), 2u);  // b prefilled in the same step, its slot's row for a still in flight
    EXPECT_EQ(e.steps.size(), 4u);     // a's three steps and the one begun before its stop was seen
    run_to_idle(s);
    s.step();  // collects the last step begun
    EXPECT_EQ(b->tokens, e.alone(pb, 5, {}, 0));
    EXPECT_EQ(e.steps.size(), 8u);     // b: 4 steps after its prefill's token, none for nothing (max_tokens)
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// Two decode steps in flight (an engine that takes them): the next step is queued before the host waits for the one
// before, so every step's end but the last finds the next behind it. A stream still gets a token a step; a stop still
// costs one row computed for nothing (the one step begun before it is seen), max_tokens none; tokens as alone.
TEST(ServeScheduler, TwoStepsInFlight) {
    FakeEngineOptions fo{1, 128};
    fo.in_flight = 2;
    FakeEngine e(fo);
    Scheduler s(&e, {});
    const std::vector<int> pa = prompt_of(8, 5), pb = prompt_of(6, 9);
    const std::vector<int> alone = e.alone(pa, 10, {}, 0);
    const int stop = alone[3];
    ASSERT_EQ(std::find(alone.begin(), alone.begin() + 3, stop), alone.begin() + 3) << "pick another prompt";
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(pa, 10, a, {}, 0, stop));
    s.submit(make_request(pb, 30, b));
    s.step();  // a prefilled: begun, its first token read at the next step
    EXPECT_TRUE(a->tokens.empty());
    EXPECT_TRUE(e.steps.empty());
    s.step();  // two steps begun behind the prefill, its token read and the first step waited for: a's second token
    EXPECT_EQ(e.steps.size(), 2u);
    EXPECT_EQ(a->tokens.size(), 2u);
    s.step();
    s.step();  // steps 3 and 4 begun; a's 4th token (the stop) ends it; b is prefilled behind step 4's row for a
    EXPECT_EQ(a->tokens, std::vector<int>(alone.begin(), alone.begin() + 4));
    EXPECT_EQ(a->end.reason, FinishReason::Stop);
    EXPECT_EQ(e.steps.size(), 4u);
    ASSERT_EQ(e.prefills.size(), 2u);
    s.step();  // b's first row begun, step 4 (a's row, dropped) waited for, then b's prefill: its first token
    EXPECT_EQ(b->tokens.size(), 1u);
    for (int i = 0; i < 10; i++) {
        const size_t before = b->tokens.size();
        s.step();
        EXPECT_EQ(b->tokens.size(), before + 1) << "step " << i;
    }
    run_to_idle(s);
    EXPECT_EQ(b->tokens, e.alone(pb, 30, {}, 0));
    EXPECT_EQ(e.steps.size(), 4u + 29u);  // b: 29 steps after its prefill's token, none for nothing (max_tokens)
    ASSERT_FALSE(e.in_flight_at_end.empty());
    EXPECT_EQ(std::count(e.in_flight_at_end.begin(), e.in_flight_at_end.end(), 2),
              (long)e.in_flight_at_end.size() - 1);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// The decode steps' device time the engine reports reaches the scheduler's stats (/health's decode_device_ms): the
// fake engine's steps take step_us each on its device.
TEST(ServeScheduler, DecodeDeviceTimeInTheStats) {
    FakeEngineOptions fo{2, 128};
    fo.step_us = 250;
    FakeEngine e(fo);
    Scheduler s(&e, {});
    EXPECT_EQ(s.stats().decode_device_ms, 0.0);
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
    s.submit(make_request(prompt_of(4, 1), 12, a));
    s.submit(make_request(prompt_of(6, 2), 7, b));
    run_to_idle(s);
    const SchedulerStats st = s.stats();
    ASSERT_GT(st.decode_steps, 0u);
    EXPECT_DOUBLE_EQ(st.decode_device_ms, e.decode_device_ms());
    EXPECT_NEAR(st.decode_device_ms, 0.25 * (double)e.steps.size(), 1e-9);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

// Whole prompts begun and ended apart: at most prefills_in_flight calls are begun before the oldest is read (the
// third call of a step reads the first's tokens), a sequence's first decode row is begun before its first token is
// read, so a first token that ends it (a stop) leaves that row computed for nothing and max_tokens 1 gets no row;
// a sequence cancelled while its prefill is in flight ends without its token. Tokens as alone.
TEST(ServeScheduler, PrefillsBegunAndEndedApart) {
    FakeEngineOptions fo{4, 128};
    fo.in_flight = 2;
    FakeEngine e(fo);
    Scheduler s(&e, {});
    const std::vector<int> pa = prompt_of(5, 1), pb = prompt_of(6, 2), pc = prompt_of(7, 3), pd = prompt_of(4, 4);
    const int stop = e.alone(pb, 1, {}, 0)[0];  // b's first token is its stop
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    auto d = std::make_shared<Outcome>();
    s.submit(make_request(pa, 1, a));
    s.submit(make_request(pb, 20, b, {}, 0, stop));
    s.submit(make_request(pc, 20, c));
    SequenceRequest rd = make_request(pd, 20, d);
    auto cancel_d = rd.cancel;
    s.submit(std::move(rd));
    s.step();  // four calls of one prompt: the third reads the first's token (a: max_tokens 1, ended), the fourth b's
    EXPECT_EQ(e.whole_calls, (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(e.max_prefills_in_flight, 2);
    EXPECT_EQ(a->tokens.size(), 1u);
    EXPECT_EQ(a->end.reason, FinishReason::Length);
    EXPECT_EQ(b->end.reason, FinishReason::Stop);
    EXPECT_TRUE(c->tokens.empty());
    EXPECT_TRUE(e.steps.empty());
    cancel_d->store(true);  // its prefill in flight
    s.step();  // c's first rows begun before its first token is read (d's too: the steps begin before cancels are
               // seen, rows for nothing); d's token dropped
    ASSERT_EQ(e.steps.size(), 2u);
    EXPECT_EQ(e.steps[0], (std::vector<int>{2, 3}));
    EXPECT_EQ(c->tokens.size(), 2u);  // the prefill's, then the first step's
    EXPECT_EQ(d->end.reason, FinishReason::Cancelled);
    EXPECT_TRUE(d->tokens.empty());
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    EXPECT_EQ(a->tokens, e.alone(pa, 1, {}, 0));
    EXPECT_EQ(b->tokens, std::vector<int>{stop});
    EXPECT_EQ(c->tokens, e.alone(pc, 20, {}, 0));
    EXPECT_EQ(e.steps.size(), 19u);  // c's 19 (max_tokens: none past its last); d's rows rode in the first two
}

TEST(ServeScheduler, EngineFailureEndsOnlyThatSequence) {
    for (int depth : {1, 2}) {
        FakeEngineOptions fo{2, 64};
        fo.in_flight = depth;
        FakeEngine e(fo);
        e.fail_slot = 1;
        Scheduler s(&e, {});
        auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>();
        s.submit(make_request(prompt_of(4, 1), 10, a));
        s.submit(make_request(prompt_of(4, 2), 10, b));
        run_to_idle(s);
        EXPECT_EQ(a->end.reason, FinishReason::Length);
        EXPECT_EQ(a->tokens, e.alone(prompt_of(4, 1), 10, {}, 0));
        EXPECT_EQ(b->end.reason, FinishReason::Error);
        EXPECT_EQ(b->tokens.size(), 1u);  // the prefill's token only
        EXPECT_FALSE(b->end.error.empty());
        EXPECT_EQ(s.stats().errors, 1u);
    }
}

// SIGTERM's path: stop accepting, finish everything accepted (queued included), then run() returns.
TEST(ServeScheduler, DrainFinishesInFlightAndRefusesNew) {
    for (int depth : {1, 2}) {
        FakeEngineOptions fo;
        fo.slots = 2, fo.context = 64, fo.step_us = 2000, fo.in_flight = depth;
        FakeEngine e(fo);
        Scheduler s(&e, {});
        std::thread engine([&] { s.run(); });
        std::vector<std::shared_ptr<Outcome>> outs;
        for (int i = 0; i < 5; i++) {
            outs.push_back(std::make_shared<Outcome>());
            ASSERT_EQ(s.submit(make_request(prompt_of(3, i), 8, outs.back())), Admission::Accepted);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        s.begin_drain();
        auto late = std::make_shared<Outcome>();
        EXPECT_EQ(s.submit(make_request(prompt_of(3, 9), 8, late)), Admission::Draining);
        engine.join();
        for (const auto& o : outs) {
            EXPECT_EQ(o->ends, 1);
            EXPECT_EQ(o->end.reason, FinishReason::Length);
            EXPECT_EQ(o->tokens.size(), 8u);
        }
        EXPECT_EQ(late->ends, 0);
        EXPECT_TRUE(s.stats().draining);
        EXPECT_EQ(s.stats().running + s.stats().queued, 0);
    }
}

TEST(ServeScheduler, ShutDownEndsEverythingOnce) {
    for (int depth : {1, 2}) {
        FakeEngineOptions fo;
        fo.slots = 1, fo.context = 200, fo.step_us = 1000, fo.in_flight = depth;
        FakeEngine e(fo);
        std::vector<std::shared_ptr<Outcome>> outs;
        {
            Scheduler s(&e, {});
            std::thread engine([&] { s.run(); });
            for (int i = 0; i < 3; i++) {
                outs.push_back(std::make_shared<Outcome>());
                s.submit(make_request(prompt_of(3, i), 150, outs.back()));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            s.shut_down();
            engine.join();
        }
        for (const auto& o : outs) {
            EXPECT_EQ(o->ends, 1);
            EXPECT_EQ(o->end.reason, FinishReason::Cancelled);
        }
        EXPECT_TRUE(e.violations.empty());
    }
}

}  // namespace
