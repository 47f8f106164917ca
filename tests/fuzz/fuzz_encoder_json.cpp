// Fuzzes encoder.json loading (BPETokenizer's load_encoder_json, llmc/tokenizer/bpe.h): the input is
// encoder.json, vocab.bpe is the fixed synthetic one of fuzz_inputs.h (demo_vocab, demo_vocab_file). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb, or
// a vocabulary that loads but does not encode and decode text back to itself (check_loaded_bpe).
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string vocab_bpe = fuzz::demo_vocab_file("vocab.bpe");
    const std::string encoder_json = fuzz::write_scratch_file("encoder.json", data, size);
    fuzz::load_and_check_bpe(encoder_json, vocab_bpe);
    return 0;
}
