// Fuzzes the tokenizer file reader (llmc/formats/tokenizer_file.h, llm.c's gpt2_tokenizer.bin) and the printing
// of its token bytes (append_printable, printable_token, TokenPrinter in llmc/inference/sampler.h). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb,
// an accepted file that does not survive write_tokenizer_file + read_tokenizer_file, printed text that is
// not safe for a terminal (invalid UTF-8 or a control character other than newline and tab), or a token
// stream that is safe text already but prints differently.
#include "llmc/formats/tokenizer_file.h"
#include "llmc/inference/sampler.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("tokenizer.bin", data, size);
    TokenizerFile t;
    if (!fuzz::accepts([&] { t = read_tokenizer_file(path); })) return 0;
    FUZZ_REQUIRE(!t.tokens.empty() && t.eot_token >= 0 && (size_t)t.eot_token < t.tokens.size(), "eot %d of %zu tokens",
                 t.eot_token, t.tokens.size());

    const std::string again_path = fuzz::scratch_dir() + "/tokenizer_again.bin";
    write_tokenizer_file(again_path, t);
    const TokenizerFile again = read_tokenizer_file(again_path);
    FUZZ_REQUIRE(again.tokens == t.tokens && again.eot_token == t.eot_token, "tokens changed on a rewrite");

    // Printing: one token at a time, and as a stream.
    std::string raw, streamed;
    TokenPrinter printer(t);
    const int n = (int)t.tokens.size();
    for (int id = 0; id < n; id++) {
        const std::string one = printable_token(t, id);
        FUZZ_REQUIRE(fuzz::is_terminal_safe(one), "printable_token(%d) is not terminal-safe", id);
        const std::string piece = printer.next(id);
        FUZZ_REQUIRE(fuzz::is_terminal_safe(piece), "TokenPrinter::next(%d) is not terminal-safe", id);
        streamed += piece;
        if (id != t.eot_token) raw += t.tokens[(size_t)id];
        else raw += "<|endoftext|>";
    }
    const std::string tail = printer.finish();
    FUZZ_REQUIRE(fuzz::is_terminal_safe(tail), "TokenPrinter::finish() is not terminal-safe");
    streamed += tail;
    if (fuzz::is_terminal_safe(raw)) FUZZ_REQUIRE(streamed == raw, "safe token text was altered when printed");
    for (int id : {-1, n, t.eot_token}) {
        FUZZ_REQUIRE(fuzz::is_terminal_safe(printer.next(id)), "TokenPrinter::next(%d) is not terminal-safe", id);
    }
    return 0;
}
