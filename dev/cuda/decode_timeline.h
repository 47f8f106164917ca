// The persistent decode step's timeline (Step::timeline), summarised: where a phase's time goes on each block, in
// one launch, instead of subtracting launches without parts of it. Consumer thread 0 of every block stamps clock64
// at six points of each phase (its start, its wait for the phase before done, its input staged, its products done,
// past the barrier that ends it, its release); the intervals are thread 0's view, so "barrier" holds the wait for the
// block's slowest warp, "release" the release's fence (the block's stores acknowledged), and the first phase (layer
// 0's qkv) has no wait. Of its products, the time it waited for pages; and the producer's stamps
// say how long before the products began it issued the phase's first page, and before they ended its last. The
// clock's rate comes from the same blocks' %globaltimer over the kernel (clock64 is one counter an SM). One launch,
// after the L2 is overwritten (cold, as the step's timings).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "llmc/kernels/decode/decode_persistent.cuh"

namespace decode_timeline {

namespace dp = decode_persistent;

// A phase's name in the report: its kind and where it sits in a layer.
inline std::string phase_name(const dp::Phase& ph, int C) {
    if (ph.kind == dp::Kind::Attention) return "attention";
    switch (ph.epilogue) {
        case dp::Epilogue::Qkv: return "qkv (LN)";
        case dp::Epilogue::Gelu: return "fc (LN)";
        case dp::Epilogue::Logits: return "classifier (LN)";
        case dp::Epilogue::Residual: return ph.K == C ? "attproj" : "fcproj";
        default: return "other";
    }
}

// t: the timeline as the kernel left it (blocks x phases x kTimelineMarks stamps, then blocks x 4: clock64 and
// %globaltimer at the start, then at the end). Returns false when a stamp is missing or out of order.
inline bool print(const std::vector<unsigned long long>& t, const std::vector<dp::Phase>& phases, int blocks, int C) {
    const int P = (int)phases.size(), M = dp::kTimelineMarks;
    const size_t spans = (size_t)blocks * P * M;
    if (t.size() != spans + (size_t)blocks * 4) return false;
    for (unsigned long long v : t)
        if (v == ~0ull) return false;  // poisoned: a stamp never written
    for (size_t j = 0; j < spans; j++) {  // a phase's five stamps in order, the barrier's between the last two
        if (j % M != 0 && j % M < 5 && t[j] < t[j - 1]) return false;
        const size_t m = j - j % M;  // the phase's first stamp
        if (j % M == dp::kMarkSynced && (t[j] < t[m + 3] || t[j] > t[m + 4])) return false;
    }
    double cycles = 0, ns = 0;
    for (int b = 0; b < blocks; b++) {
        const unsigned long long* sp = &t[spans + (size_t)b * 4];
        if (sp[2] <= sp[0] || sp[3] <= sp[1]) return false;
        cycles += (double)(sp[2] - sp[0]), ns += (double)(sp[3] - sp[1]);
    }
    const double ghz = cycles / ns, us = 1e-3 / ghz;  // cycles to µs
    std::vector<std::string> names;
    for (const dp::Phase& ph : phases) {
        const std::string n = phase_name(ph, C);
        bool seen = false;
        for (const std::string& m : names) seen |= m == n;
        if (!seen) names.push_back(n);
    }
    // thread 0's five intervals (the end as its barrier and its release), then of its products the pages' wait,
    // then the producer's lead: its first page issued before the products began, its last before they ended
    // (negative: after)
    const char* parts[] = {"wait", "stage", "products", "barrier", "release", "pages' wait", "first issued",
                           "last issued"};
    auto value = [&](const unsigned long long* m, int k) {
        if (k < 3) return (double)(m[k + 1] - m[k]);
        if (k == 3) return (double)(m[dp::kMarkSynced] - m[3]);
        if (k == 4) return (double)(m[4] - m[dp::kMarkSynced]);
        if (k == 5) return (double)m[dp::kMarkPagesWait];
        const unsigned long long issued = m[k == 6 ? dp::kMarkFirstIssued : dp::kMarkLastIssued];
        return issued == 0 ? 0.0 : (double)(long long)(m[k == 6 ? 2 : 3] - issued);
    };
    constexpr int kParts = 8;
    printf("the timeline (one launch; consumer thread 0 of each block; clock64 at %.3f GHz by %%globaltimer): us a "
           "phase, the mean over blocks, then over the step's phases of that kind [the slowest block's; of a lead, "
           "the least]\n", ghz);
    printf("  %-16s %6s", "phase", "count");
    for (const char* p : parts) printf("  %15s", p);  // each column: mean [slowest block, or least lead]
    printf("\n");
    double total[kParts] = {};
    for (const std::string& n : names) {
        double mean[kParts] = {}, slow[kParts] = {};
        int count = 0;
        for (int i = 0; i < P; i++) {
            if (phase_name(phases[i], C) != n) continue;
            count++;
            for (int k = 0; k < kParts; k++) {
                double sum = 0, worst = 0;  // the leads' worst is the least
                for (int b = 0; b < blocks; b++) {
                    const double d = value(&t[((size_t)b * P + i) * M], k) * us;
                    sum += d, worst = b == 0 ? d : k < 6 ? (d > worst ? d : worst) : (d < worst ? d : worst);
                }
                mean[k] += sum / blocks, slow[k] += worst;
            }
        }
        printf("  %-16s %6d", n.c_str(), count);
        for (int k = 0; k < kParts; k++) {
            printf("  %6.2f [%6.2f]", mean[k] / count, slow[k] / count);
            total[k] += mean[k];
        }
        printf("\n");
    }
    double span = 0;
    for (int b = 0; b < blocks; b++) span += (double)(t[spans + (size_t)b * 4 + 3] - t[spans + (size_t)b * 4 + 1]);
    printf("  the step on a block: %.4f ms (the kernel's span, mean over blocks); over its phases",
           span / blocks * 1e-6);
    for (int k = 0; k < 6; k++) printf(", %s %.4f ms", parts[k], total[k] * 1e-3);
    printf("\n");
    return true;
}

}  // namespace decode_timeline
