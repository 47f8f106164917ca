// Fuzzes the debug-state reader (reference/debug_state.h): read_debug_state(path, config), the
// config from the input's first 24 bytes (fuzz_inputs.h; the reader validates it), the rest as the file.
// Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb,
// an accepted state whose sizes do not match B, T and the model shape, a token outside the vocabulary, or
// one that does not survive write_debug_state + read_debug_state bit for bit.
#include <cstring>

#include "reference/debug_state.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

template <typename T>
static bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::ByteReader r{data, size};
    const GPT2Config c = fuzz::unpack_config(r);
    const std::string_view file = r.rest();
    const std::string path = fuzz::write_scratch_file("debug_state.bin", file);
    DebugState s;
    if (!fuzz::accepts([&] { s = read_debug_state(path, c); })) return 0;
    const size_t BT = (size_t)s.B * s.T;
    FUZZ_REQUIRE(s.inputs.size() == BT && s.targets.size() == BT && s.logits.size() == BT * c.vocab_size &&
                     s.grads.size() == gpt2_num_parameters(c),
                 "sizes do not match B=%d T=%d", s.B, s.T);
    for (size_t i = 0; i < BT; i++) {
        FUZZ_REQUIRE(s.inputs[i] >= 0 && s.inputs[i] < c.vocab_size && s.targets[i] >= 0 && s.targets[i] < c.vocab_size,
                     "token %zu outside the vocabulary", i);
    }
    const std::string again_path = fuzz::scratch_dir() + "/debug_state_again.bin";
    write_debug_state(again_path, c, s);
    const DebugState again = read_debug_state(again_path, c);
    FUZZ_REQUIRE(again.B == s.B && again.T == s.T && same_bits(again.inputs, s.inputs) &&
                     same_bits(again.targets, s.targets) && same_bits(again.logits, s.logits) &&
                     same_bits(again.grads, s.grads) && memcmp(&again.loss, &s.loss, sizeof(float)) == 0,
                 "debug state changed on a rewrite");
    return 0;
}
