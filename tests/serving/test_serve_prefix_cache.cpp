// Prefix caching (llmc/serving/prefix_cache.h and the scheduler's use of it) on the fake engine, whose next token
// is a hash of the slot's whole sequence as the engine holds it, so a prefix copied wrong, from the wrong slot, too
// long, or after the slot was overwritten changes the tokens: the cache itself (deepest whole-block match leaving a
// token to prefill, token-checked hits, drops); requests sharing prefixes in random mixes, with one and two steps in
// flight and sampling, each getting exactly its tokens alone while the cache serves most of their prefixes;
// chunks never cut by the budget with the cache on; a free slot that holds the prefix taken as it is (no copy); the
// least recently used prefix evicted first.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/serving/prefix_cache.h"
#include "tests/serving/scheduler_fixture.h"

namespace {

using namespace scheduler_test;

TEST(ServePrefixCache, DeepestWholeBlocksTokenChecked) {
    PrefixCache c(4, 4);
    const std::vector<int> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    auto any = [](int) { return 0; };
    EXPECT_EQ(c.find(a.data(), (int)a.size(), any).slot, -1);
    c.hold(2, a.data(), 3, 1);  // slot 2 holds a[0..12)
    PrefixCache::Hit h = c.find(a.data(), 13, any);
    EXPECT_EQ(h.slot, 2);
    EXPECT_EQ(h.blocks, 3);
    EXPECT_EQ(c.find(a.data(), 12, any).blocks, 2);  // at least one token left to prefill
    EXPECT_EQ(c.find(a.data(), 5, any).blocks, 1);
    EXPECT_EQ(c.find(a.data(), 4, any).slot, -1);
    std::vector<int> b = a;
    b[5] = 99;  // differs in block 1
    h = c.find(b.data(), 13, any);
    EXPECT_EQ(h.slot, 2);
    EXPECT_EQ(h.blocks, 1);
    c.hold(0, a.data(), 2, 2);  // slot 0 holds two blocks: at depth 3 only slot 2; at equal depth the higher score
    EXPECT_EQ(c.find(a.data(), 13, [](int s) { return s == 0 ? 1 : 0; }).slot, 2);
    EXPECT_EQ(c.find(a.data(), 9, [](int s) { return s == 0 ? 1 : 0; }).slot, 0);
    EXPECT_EQ(c.find(a.data(), 9, [](int s) { return s == 0 ? -1 : 0; }).slot, 2);  // -1: not usable
    c.hold(2, b.data(), 1, 3);  // slot 2 now holds b's first block (a's first block too: they share it)
    EXPECT_EQ(c.blocks_held(2), 1);
    EXPECT_EQ(c.find(a.data(), 13, [](int s) { return s == 2 ? 1 : 0; }).blocks, 2);  // slot 0's two
    c.drop(0);
    h = c.find(a.data(), 13, any);
    EXPECT_EQ(h.slot, 2);
    EXPECT_EQ(h.blocks, 1);
    EXPECT_EQ(c.last_used(2), 3u);
    c.drop(2);
    EXPECT_EQ(c.find(a.data(), 13, any).slot, -1);
}

// Random requests over a few shared prefixes (0-3 blocks of a few "system prompts") and random tails.
std::vector<Job> shared_prefix_jobs(Rng& rng, int n, int chunk, int V) {
    std::vector<std::vector<int>> systems;
    for (int k = 0; k < 3; k++) systems.push_back(prompt_of(3 * chunk, 500 + k, V));
    std::vector<Job> jobs;
    for (int i = 0; i < n; i++) {
        Job j;
        const std::vector<int>& sys = systems[rng.next_u32() % systems.size()];
        const int shared = (int)(rng.next_u32() % 4) * chunk - (int)(rng.next_u32() % 2);  // sometimes one short
        j.prompt.assign(sys.begin(), sys.begin() + std::max(0, shared));
        const std::vector<int> tail = prompt_of(1 + (int)(rng.next_u32() % (2 * chunk)), 1000 + i, V);
        j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
        j.max_tokens = 1 + (int)(rng.next_u32() % 20);
        j.arrive = (int)(rng.next_u32() % 80);
        if (rng.next_u32() % 2) j.pick.params = PickParams{0.3f + rng.uniform(), (int)(rng.next_u32() % 50), 0.9f};
        j.seed = rng.next_u64();
        j.out = std::make_shared<Outcome>();
        jobs.push_back(j);
    }
    return jobs;
}

TEST(ServePrefixCache, SharedPrefixesGiveEachRequestItsTokensAlone) {
    for (int depth : {1, 2}) {
        for (int budget : {8, 13, 64}) {
            SCOPED_TRACE("steps in flight " + std::to_string(depth) + ", budget " + std::to_string(budget));
            const int chunk = 8;
            FakeEngineOptions fo{4, 128, 1000, chunk, /*prefill_rows*/ 2};
            fo.in_flight = depth;
            FakeEngine e(fo);
            SchedulerOptions o;
            o.max_queue = 100, o.prefill_budget = budget, o.prefix_cache = true;
            Scheduler s(&e, o);
            ASSERT_TRUE(s.prefix_caching());
            Rng rng(7 + depth * 31 + budget);
            std::vector<Job> jobs = shared_prefix_jobs(rng, 60, chunk, 1000);
            for (int t = 0; t < 3000; t++) {
                for (Job& j : jobs) {
                    if (j.arrive != t) continue;
                    ASSERT_EQ(s.submit(make_request(j.prompt, j.max_tokens, j.out, j.pick, j.seed)), Admission::Accepted);
                }
                s.step();
            }
            EXPECT_TRUE(e.violations.empty()) << e.violations.front();
            for (const Job& j : jobs) {
                EXPECT_EQ(j.out->ends, 1);
                EXPECT_EQ(j.out->tokens, e.alone(j.prompt, j.max_tokens, j.pick, j.seed));
            }
            const SchedulerStats st = s.stats();
            // low on purpose: a prompt admitted before the one sharing its prefix has prefilled it cannot reuse it
            EXPECT_GT(st.prefix_hit_tokens, st.prefix_queried_tokens / 10) << "the cache served little";
            EXPECT_GT(e.copies.size(), 5u);
            uint64_t prompt_tokens = 0;
            for (const Job& j : jobs) prompt_tokens += j.prompt.size();
            EXPECT_EQ(st.prefill_tokens + st.prefix_hit_tokens, prompt_tokens);  // every prompt token once
            for (const FakePrefill& p : e.prefills)  // chunks whole and aligned, never cut by the budget
                if (p.n > chunk || (p.start > 0 && (p.start % chunk != 0 || (p.n != chunk && !p.last))))
                    ADD_FAILURE() << "a chunk at " << p.start << " of " << p.n << (p.last ? " (last)" : "");
            for (const auto& c : e.copies) EXPECT_EQ(c.n % chunk, 0);
        }
    }
}

TEST(ServePrefixCache, AFreeSlotHoldingThePrefixIsTakenAsItIs) {
    FakeEngine e({3, 128, 1000, /*chunk*/ 8});
    SchedulerOptions o;
    o.prefix_cache = true;
    Scheduler s(&e, o);
    std::vector<int> p = prompt_of(20, 1), q = p;
    q.resize(16);
    const std::vector<int> tail = prompt_of(5, 9);
    q.insert(q.end(), tail.begin(), tail.end());  // q shares p's first 16 tokens, two blocks
    auto a = std::make_shared<Outcome>(), b = std::make_shared<Outcome>(), c = std::make_shared<Outcome>();
    ASSERT_EQ(s.submit(make_request(prompt_of(9, 3), 3, c)), Admission::Accepted);  // slot 0
    ASSERT_EQ(s.submit(make_request(p, 4, a)), Admission::Accepted);               // slot 1
    run_to_idle(s);
    ASSERT_EQ(s.submit(make_request(q, 6, b)), Admission::Accepted);
    run_to_idle(s);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
    EXPECT_EQ(b->tokens, e.alone(q, 6, {}, 0));
    ASSERT_EQ(e.copies.size(), 1u);
    EXPECT_EQ(e.copies[0].from, 1);  // p's slot, free now, taken as it is
    EXPECT_EQ(e.copies[0].to, 1);
    EXPECT_EQ(e.copies[0].n, 16);
    EXPECT_EQ(e.prefills.back().start, 16);
    EXPECT_EQ(e.prefills.back().n, 5);
    EXPECT_EQ(s.stats().prefix_hit_tokens, 16u);
}

TEST(ServePrefixCache, TheLeastRecentlyUsedPrefixGoesFirst) {
    FakeEngine e({2, 128, 1000, /*chunk*/ 4});
    SchedulerOptions o;
    o.prefix_cache = true;
    Scheduler s(&e, o);
    const std::vector<int> p1 = prompt_of(9, 1), p2 = prompt_of(9, 2), p3 = prompt_of(9, 3);
    auto run = [&](const std::vector<int>& p) {
        auto out = std::make_shared<Outcome>();
        EXPECT_EQ(s.submit(make_request(p, 2, out)), Admission::Accepted);
        run_to_idle(s);
        EXPECT_EQ(out->tokens, e.alone(p, 2, {}, 0));
    };
    run(p1);  // slot 0 holds p1's two blocks
    run(p2);  // slot 1 holds p2's
    run(p1);  // p1 again: slot 0 as it is (p1 now the most recent)
    EXPECT_EQ(e.copies.size(), 1u);
    run(p3);  // evicts p2 (used longest ago)
    run(p1);  // still held
    EXPECT_EQ(e.copies.size(), 2u);
    EXPECT_EQ(e.copies.back().from, e.copies.back().to);
    run(p2);  // gone: computed again
    EXPECT_EQ(e.copies.size(), 2u);
    EXPECT_TRUE(e.violations.empty()) << e.violations.front();
}

TEST(ServePrefixCache, OffOrUnsupportedMeansNoCopies) {
    FakeEngine whole({2, 64, 1000, /*chunk*/ 0});  // whole prompts only: nothing to continue from a prefix
    SchedulerOptions o;
    o.prefix_cache = true;
    EXPECT_FALSE(Scheduler(&whole, o).prefix_caching());
    FakeEngine e({2, 64, 1000, 4});
    EXPECT_FALSE(Scheduler(&e, SchedulerOptions{}).prefix_caching());
}

}  // namespace
