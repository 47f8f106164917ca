// Fuzzes the multiple-choice eval file reader (llmc/formats/eval_file.h): read_eval_file on the input as a file,
// with no vocabulary and with GPT-2's (50257). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb, a file
// accepted with the vocabulary but not without it (or read differently), an accepted file whose examples break
// what the reader promises (label below the endings, nothing empty, the longest size), or one that write_eval_file
// does not give back byte for byte (the header's reserved slots aside, which the writer zeroes).
#include <cstring>
#include <vector>

#include "llmc/formats/eval_file.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("eval.bin", data, size);
    EvalFile any, gpt2;
    const bool ok_any = fuzz::accepts([&] { any = read_eval_file(path); });
    const bool ok_gpt2 = fuzz::accepts([&] { gpt2 = read_eval_file(path, 50257); });
    FUZZ_REQUIRE(ok_any || !ok_gpt2, "accepted with a vocabulary of 50257 but not without one");
    if (!ok_any) return 0;
    int longest = 0;
    for (const EvalExample& e : any.examples) {
        FUZZ_REQUIRE(!e.endings.empty() && e.label >= 0 && (size_t)e.label < e.endings.size() && !e.context.empty(),
                     "an accepted example breaks the format's rules");
        for (const auto& end : e.endings) FUZZ_REQUIRE(!end.empty(), "an accepted ending is empty");
        longest = std::max(longest, (int)eval_example_bytes(e));
    }
    FUZZ_REQUIRE(longest == any.longest_example_bytes, "longest example %d bytes, reader says %d", longest,
                 any.longest_example_bytes);
    if (ok_gpt2) {
        FUZZ_REQUIRE(gpt2.examples.size() == any.examples.size(), "the two reads give different example counts");
        for (size_t i = 0; i < any.examples.size(); i++) {
            FUZZ_REQUIRE(gpt2.examples[i].context == any.examples[i].context &&
                             gpt2.examples[i].endings == any.examples[i].endings,
                         "the two reads differ at example %zu", i);
        }
    }
    const std::string again = fuzz::scratch_dir() + "/eval_again.bin";
    write_eval_file(again, any.examples);
    std::string expected((const char*)data, size);
    memset(&expected[16], 0, kFileHeaderBytes - 16);
    FUZZ_REQUIRE(fuzz::read_whole_scratch_file(again) == expected, "write_eval_file does not give the file back");
    return 0;
}
