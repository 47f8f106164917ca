// Fuzzes the Hugging Face import (llmc/formats/safetensors.h, llmc/formats/hf_gpt2_config.h, llmc/formats/hf_gpt2.h). The input is
// config.json's text, a NUL byte, then model.safetensors' bytes (no NUL: the safetensors part is empty); both are
// written into a scratch directory, then read_safetensors_header reads the weights and read_hf_gpt2 the
// directory, as train_gpt2cu -e DIR does. Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb; an
// accepted header whose tensors do not tile the data section (sizes = dtype bytes x shape, contiguous, to the
// end); an accepted model that the safetensors reader rejects, whose size is not the shape's parameter count or
// whose wte padding rows are not +0; or one that does not survive write_model_file -> export_hf_gpt2 ->
// read_hf_gpt2 bit for bit (shape, dtype and every value; NaN payloads aside).
#include <cmath>
#include <cstring>

#include "llmc/formats/hf_gpt2.h"
#include "tests/fuzz/fuzz_common.h"

static bool same_shape(const GPT2Config& a, const GPT2Config& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
           a.num_layers == b.num_layers && a.num_heads == b.num_heads && a.channels == b.channels;
}

static void check_tiling(const SafetensorsFile& f, uint64_t file_bytes) {
    uint64_t total = 0;
    for (const SafetensorsTensor& t : f.tensors) {
        FUZZ_REQUIRE(t.end - t.begin == t.numel * (uint64_t)safetensors_dtype_bytes(t.dtype),
                     "tensor '%s': %llu bytes accepted for its dtype and shape", t.name.c_str(),
                     (unsigned long long)(t.end - t.begin));
        total += t.end - t.begin;
    }
    FUZZ_REQUIRE(f.data_start + total == file_bytes, "accepted tensors cover %llu of the %llu data bytes",
                 (unsigned long long)total, (unsigned long long)(file_bytes - f.data_start));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in((const char*)data, size);
    const size_t nul = in.find('\0');
    const std::string_view config = in.substr(0, nul), weights = nul == in.npos ? "" : in.substr(nul + 1);
    const std::string dir = fuzz::scratch_dir() + "/hf";
    ensure_directory(dir);
    fuzz::write_scratch_file("hf/config.json", config);
    const std::string weights_path = fuzz::write_scratch_file("hf/model.safetensors", weights);

    SafetensorsFile header;
    const bool header_ok = fuzz::accepts([&] { header = read_safetensors_header(weights_path); });
    if (header_ok) check_tiling(header, weights.size());
    ModelFile m;
    if (!fuzz::accepts([&] { m = read_hf_gpt2(dir); })) return 0;
    FUZZ_REQUIRE(header_ok, "read_hf_gpt2 accepts weights that read_safetensors_header rejects");
    FUZZ_REQUIRE(m.params.size() == gpt2_num_parameters(m.config), "%zu parameters read, the shape has %zu",
                 m.params.size(), gpt2_num_parameters(m.config));
    const size_t pad_begin = (size_t)m.config.vocab_size * m.config.channels;
    const size_t pad_end = (size_t)m.config.padded_vocab_size * m.config.channels;
    for (size_t i = pad_begin; i < pad_end; i++) {
        FUZZ_REQUIRE(m.params[i] == 0.0f && !std::signbit(m.params[i]), "wte padding value %zu is %g, not +0", i, m.params[i]);
    }

    // ours -> HF -> ours: a FileError on this way is a finding too (accepts() is not used)
    const std::string ours = fuzz::scratch_dir() + "/ours.bin", out_dir = fuzz::scratch_dir() + "/exported";
    write_model_file(ours, m.config, m.params.data(), m.dtype);
    export_hf_gpt2(ours, out_dir);
    const ModelFile again = read_hf_gpt2(out_dir);
    FUZZ_REQUIRE(same_shape(again.config, m.config) && again.dtype == m.dtype, "shape or dtype changed on export");
    for (size_t i = 0; i < m.params.size(); i++) {
        const float a = m.params[i], b = again.params[i];
        FUZZ_REQUIRE(memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b)),
                     "parameter %zu: %a imported, %a after export and import", i, a, b);
    }
    return 0;
}
