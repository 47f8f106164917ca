// How every test and dev program measures a result against its reference, in one place:
//   rel-L2  = ||out - ref||₂ / ||ref||₂   (the absolute norm ||out - ref||₂ when the reference is all zero)
//   max-abs = max |out - ref|
// computed in double. A NaN in `out` makes both NaN, so a check written `value <= tol` fails on it.
#pragma once

#include <cmath>
#include <cstddef>

struct ErrorStats {
    double rel_l2 = 0, max_abs = 0, ref_norm = 0;
};

// out_at(i) and ref_at(i) give the i-th values (as double) for i in [0, n).
template <typename OutAt, typename RefAt>
ErrorStats compare_by(size_t n, OutAt out_at, RefAt ref_at) {
    double diff2 = 0, ref2 = 0, max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        const double ref = ref_at(i), d = (double)out_at(i) - ref;
        diff2 += d * d;
        ref2 += ref * ref;
        if (!(std::fabs(d) <= max_abs)) max_abs = std::fabs(d);  // keeps a NaN
    }
    ErrorStats e;
    e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    e.max_abs = max_abs;
    e.ref_norm = std::sqrt(ref2);
    return e;
}

// Element-wise over two arrays of any arithmetic types.
template <typename Out, typename Ref>
ErrorStats compare(const Out* out, const Ref* ref, size_t n) {
    return compare_by(n, [&](size_t i) { return (double)out[i]; }, [&](size_t i) { return (double)ref[i]; });
}
