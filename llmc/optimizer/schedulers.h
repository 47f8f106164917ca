// Learning-rate schedules (llm.c's -k flag: cosine, linear, constant, wsd). Steps count from 0.
//
//   warmup  (step < warmup_steps):  lr = max_lr * (step + 1) / warmup_steps   (linear, never 0)
//   after warmup, with min_lr = max_lr * final_lr_frac and
//   progress = (step - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1]:
//     Cosine:   min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * progress))
//     Linear:   max_lr - (max_lr - min_lr) * progress
//     Constant: max_lr
//     WSD (warmup-stable-decay): max_lr until the last 20% of total_steps, then over those
//       decay_steps = max(1, floor(0.2 * total_steps)) steps, starting at step total_steps - decay_steps,
//       lr = min_lr + (max_lr - min_lr) * (1 - sqrt(d)), d = (step - decay_start) / decay_steps in [0, 1].
// Warmup always wins: a step inside the warmup is on the warmup ramp whatever the schedule.
// Steps at or past total_steps stay at the end value (min_lr, or max_lr for Constant).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

enum class LRSchedule { Cosine, Linear, Constant, WSD };

// Accepts the names llm.c uses: "cosine", "linear", "constant", "wsd". Returns false otherwise.
inline bool parse_lr_schedule(const std::string& name, LRSchedule* out) {
    if (name == "cosine") *out = LRSchedule::Cosine;
    else if (name == "linear") *out = LRSchedule::Linear;
    else if (name == "constant") *out = LRSchedule::Constant;
    else if (name == "wsd") *out = LRSchedule::WSD;
    else return false;
    return true;
}

inline const char* lr_schedule_name(LRSchedule s) {
    switch (s) {
        case LRSchedule::Cosine: return "cosine";
        case LRSchedule::Linear: return "linear";
        case LRSchedule::Constant: return "constant";
        case LRSchedule::WSD: return "wsd";
    }
    return "?";
}

constexpr double kWSDDecayFraction = 0.2;
constexpr double kPi = 3.14159265358979323846;

struct LRScheduler {
    LRSchedule type = LRSchedule::Cosine;
    float max_lr = 3e-4f;
    int warmup_steps = 0;
    int total_steps = 1;
    float final_lr_frac = 0.0f;

    // Empty when the settings make sense, else what is wrong (for the trainer's usage error).
    std::string invalid_reason() const {
        if (!(max_lr >= 0.0f) || !std::isfinite(max_lr)) return "max_lr must be a finite value >= 0";
        if (warmup_steps < 0) return "warmup_steps must be >= 0";
        if (total_steps < 1) return "total_steps must be >= 1";
        if (!(final_lr_frac >= 0.0f && final_lr_frac <= 1.0f)) return "final_lr_frac must be in [0, 1]";
        return "";
    }

    float lr_at(int step) const {
        if (step < warmup_steps) return (float)((double)max_lr * (step + 1) / warmup_steps);
        const double max = max_lr, min = (double)max_lr * final_lr_frac;
        switch (type) {
            case LRSchedule::Constant: return max_lr;
            case LRSchedule::Cosine: return (float)(min + (max - min) * 0.5 * (1.0 + std::cos(kPi * progress(step))));
            case LRSchedule::Linear: return (float)(max - (max - min) * progress(step));
            case LRSchedule::WSD: {
                const int decay_steps = std::max(1, (int)(kWSDDecayFraction * total_steps));
                const int decay_start = total_steps - decay_steps;
                if (step < decay_start) return max_lr;
                const double d = std::min(1.0, (double)(step - decay_start) / decay_steps);
                return (float)(min + (max - min) * (1.0 - std::sqrt(d)));
            }
        }
        return max_lr;
    }

private:
    double progress(int step) const {
        const int span = total_steps - warmup_steps;
        if (span <= 0) return 1.0;
        return std::clamp((double)(step - warmup_steps) / span, 0.0, 1.0);
    }
};
