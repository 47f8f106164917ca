// Fuzzes the generation program's flags and prompts (llmc/app/generate/generate_args.h): parse_generate_args on an argv cut from
// the input at NUL bytes; then the input itself as a prompt file (read_prompt_texts) and, cut into ids, as prompts
// checked against a small model (check_prompts). Expected: ParseStatus::Error with a message, FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an Error without a message, an accepted command
// line whose values break what the parser promises (a model, exactly one of -p/-pf, -n >= 1, temperature >= 0,
// top-k >= 0, top-p in (0, 1]); prompt lines that are empty, hold a NUL or a line end, or do not rebuild the file;
// check_prompts accepting an empty prompt, an id outside the vocabulary, a prompt without room for a token, or
// returning a length outside [1, -n].
#include <cmath>

#include "llmc/app/generate/generate_args.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<std::string> args = fuzz::unpack_argv(data, size, 64);
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    GenerateArgs a;
    std::string error;
    const ParseStatus status = parse_generate_args((int)argv.size(), argv.data(), &a, &error);
    if (status == ParseStatus::Error) FUZZ_REQUIRE(!error.empty(), "an error without a message");
    if (status == ParseStatus::Ok) {
        FUZZ_REQUIRE(!a.model.empty() && (a.has_prompt != !a.prompt_file.empty()) && (!a.has_prompt || !a.prompt.empty()),
                     "a command line without a model or with not exactly one prompt source accepted");
        FUZZ_REQUIRE(a.new_tokens >= 1 && a.top_k >= 0 && std::isfinite(a.temperature) && a.temperature >= 0 &&
                         a.top_p > 0 && a.top_p <= 1 && !a.vocab_dir.empty(),
                     "a value out of range accepted");
    }

    // the input as a prompt file
    GenerateArgs file_args;
    file_args.prompt_file = fuzz::write_scratch_file("prompts.txt", data, size);
    std::vector<std::string> lines;
    if (fuzz::accepts([&] { lines = read_prompt_texts(file_args); })) {
        std::string rebuilt;
        for (const std::string& l : lines) {
            FUZZ_REQUIRE(!l.empty() && l.find('\0') == std::string::npos && l.find('\n') == std::string::npos,
                         "a prompt line that is empty or holds a NUL or a line end");
            rebuilt += l;
        }
        std::string plain((const char*)data, size);  // the file without its line ends
        std::string stripped;
        for (size_t i = 0; i < plain.size(); i++) {
            if (plain[i] == '\n') continue;
            if (plain[i] == '\r' && i + 1 <= plain.size() && (i + 1 == plain.size() || plain[i + 1] == '\n')) continue;
            stripped += plain[i];
        }
        FUZZ_REQUIRE(rebuilt == stripped, "the prompt lines do not rebuild the file");
    }

    // the input as prompts of ids (one byte each, 0xFF ends a prompt) for a model with V = 200, context 16
    std::vector<std::vector<int>> prompts(1);
    for (size_t i = 0; i < size && prompts.size() < 8; i++) {
        if (data[i] == 0xFF) prompts.emplace_back();
        else prompts.back().push_back((int)data[i] - 20);
    }
    const int new_tokens = size ? 1 + data[0] % 40 : 1;
    int room = -1;
    if (fuzz::accepts([&] { room = check_prompts(prompts, 200, 16, new_tokens, [](size_t i) { return "prompt " + std::to_string(i); }); })) {
        for (const auto& p : prompts) {
            FUZZ_REQUIRE(!p.empty() && p.size() < 16, "a prompt of %zu tokens accepted", p.size());
            for (int id : p) FUZZ_REQUIRE(id >= 0 && id < 200, "id %d accepted", id);
        }
        FUZZ_REQUIRE(room >= 1 && room <= new_tokens, "room %d for -g %d", room, new_tokens);
    }
    return 0;
}
