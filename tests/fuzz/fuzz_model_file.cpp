// Fuzzes the model file reader (llmc/formats/model_file.h): read_model_header and read_model_file on the input
// as a file (fp32 v3 and bf16 v5 checkpoints). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb,
// the two readers disagreeing (one accepts what the other rejects, or a different shape or dtype), or an
// accepted file that does not survive write_model_file + read_model_file (same shape and dtype, every value
// bit for bit except NaN payloads and the wte padding rows V..Vp-1, which the writer zeroes).
#include <cmath>
#include <cstring>

#include "llmc/formats/model_file.h"
#include "tests/fuzz/fuzz_common.h"

static bool same_shape(const GPT2Config& a, const GPT2Config& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
           a.num_layers == b.num_layers && a.num_heads == b.num_heads && a.channels == b.channels;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("model.bin", data, size);
    GPT2Config header;
    ParamDtype header_dtype = ParamDtype::FP32;
    const bool header_ok = fuzz::accepts([&] { header = read_model_header(path, &header_dtype); });
    ModelFile m;
    const bool ok = fuzz::accepts([&] { m = read_model_file(path); });
    FUZZ_REQUIRE(ok == header_ok, "read_model_header %s the file, read_model_file %s it",
                 header_ok ? "accepts" : "rejects", ok ? "accepts" : "rejects");
    if (!ok) return 0;
    FUZZ_REQUIRE(same_shape(header, m.config) && header_dtype == m.dtype, "header and file readers disagree on the shape");
    FUZZ_REQUIRE(m.params.size() == gpt2_num_parameters(m.config), "%zu parameters read, the shape has %zu",
                 m.params.size(), gpt2_num_parameters(m.config));

    const std::string again_path = fuzz::scratch_dir() + "/model_again.bin";
    write_model_file(again_path, m.config, m.params.data(), m.dtype);  // a FileError here is a finding too
    const ModelFile again = read_model_file(again_path);
    FUZZ_REQUIRE(same_shape(again.config, m.config) && again.dtype == m.dtype, "shape or dtype changed on a rewrite");
    const size_t pad_begin = (size_t)m.config.vocab_size * m.config.channels;
    const size_t pad_end = (size_t)m.config.padded_vocab_size * m.config.channels;
    for (size_t i = 0; i < m.params.size(); i++) {
        const float a = m.params[i], b = again.params[i];
        if (i >= pad_begin && i < pad_end) {
            FUZZ_REQUIRE(b == 0.0f && !std::signbit(b), "wte padding value %zu is %g after a rewrite, not +0", i, b);
        } else {
            FUZZ_REQUIRE(memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b)),
                         "parameter %zu: %a read, %a after a rewrite", i, a, b);
        }
    }
    return 0;
}
