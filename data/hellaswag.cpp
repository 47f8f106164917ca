// hellaswag: HellaSwag JSONL -> llm.c's eval file, the file llm.c's dev/data/hellaswag.py writes (rendering:
// data/hellaswag_convert.h; format: llmc/formats/eval_file.h; docs/EVALUATION.md).
//   data/hellaswag [--vocab-dir DIR] [-o OUT.bin] INPUT.jsonl      (also .jsonl.gz / .jsonl.zst)
// Every bad line is reported (one line each: file, line number, field) and then nothing is written.
#include <cstdio>
#include <string>
#include <vector>

#include "data/compressed_input.h"
#include "data/hellaswag_convert.h"
#include "data/prepro_input.h"
#include "llmc/core/utils.h"
#include "llmc/core/version.h"
#include "llmc/formats/eval_file.h"
#include "llmc/tokenizer/bpe_encoder.h"

static const char* kUsage =
    "usage: data/hellaswag [--vocab-dir DIR] [-o OUT.bin] INPUT.jsonl\n"
    "  INPUT        HellaSwag as published (hellaswag_val.jsonl; also .jsonl.gz, .jsonl.zst): one object per line\n"
    "               with \"ctx\", \"endings\" (4 strings) and \"label\" (0-3); other fields are ignored\n"
    "  -o OUT.bin   the eval file (default: INPUT with .jsonl[.gz|.zst] replaced by .bin)\n"
    "  --vocab-dir  encoder.json + vocab.bpe (default data/cache/gpt2)\n"
    "  -h, --help   this;  --version: the program and the commit it was built from\n"
    "The context is tokenized as it is, each ending with a space before it, as llm.c's dev/data/hellaswag.py.\n";

constexpr int kMaxErrorLines = 20;  // bad lines reported one by one; past this, only counted

int main(int argc, char** argv) {
    return run_tool("data/hellaswag", [&] {
        std::string vocab_dir = "data/cache/gpt2", out, input;
        for (int i = 1; i < argc; i++) {
            const std::string a = argv[i];
            auto value = [&]() -> std::string {
                if (i + 1 >= argc) throw UsageError(a + ": needs a value");
                return argv[++i];
            };
            exit_on_help_or_version(a, kUsage, "data/hellaswag");
            if (a == "--vocab-dir") {
                vocab_dir = value();
            } else if (a == "-o") {
                out = value();
            } else if (a.size() > 1 && a[0] == '-') {
                throw UsageError(a + ": unknown option");
            } else if (!input.empty()) {
                throw UsageError(a + ": one INPUT only (" + input + " given already)");
            } else {
                input = a;
            }
        }
        if (input.empty()) throw UsageError("INPUT: missing (a HellaSwag .jsonl file)");
        if (out.empty()) {
            out = input;
            for (const char* ext : {".jsonl.gz", ".jsonl.zst", ".jsonl"}) {
                if (path_ends_with(out, ext)) {
                    out.resize(out.size() - strlen(ext));
                    break;
                }
            }
            out += ".bin";
        }
        check_input_file(input, /*force_jsonl*/ true, "ctx");  // a .gz name over other data, binary data: one line
        BPETokenizer tok = BPETokenizer::load(vocab_dir);
        BPEEncoder enc(tok);

        // The file a line at a time (JsonlReader's stream, without its documents): every line is checked.
        DecompressingReader in(input);
        std::vector<EvalExample> examples;
        std::string pending;
        std::vector<char> buf(1 << 20);
        size_t line_no = 0, bad = 0;
        auto take_line = [&](std::string_view line) {
            line_no++;
            if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank
            try {
                examples.push_back(render_hellaswag(parse_hellaswag_line(line, input, line_no), enc, input, line_no));
            } catch (const FileError& e) {
                if (++bad <= kMaxErrorLines) fprintf(stderr, "error: %s\n", e.what());
            }
        };
        for (size_t got; (got = in.read(buf.data(), buf.size())) > 0;) {
            pending.append(buf.data(), got);
            size_t start = 0;
            for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
                take_line(std::string_view(pending).substr(start, nl - start));
            }
            pending.erase(0, start);
        }
        if (!pending.empty()) take_line(pending);
        if (bad > 0) {
            file_error(input, "%zu bad line%s%s; nothing written", bad, bad == 1 ? "" : "s",
                       bad > (size_t)kMaxErrorLines ? " (the first 20 shown)" : "");
        }
        if (examples.empty()) file_error(input, "no examples (the file is empty)");
        if (examples.size() > (size_t)kEvalMaxExamples) {
            file_error(input, "%zu examples, more than the eval file's %d", examples.size(), kEvalMaxExamples);
        }
        write_eval_file(out, examples);
        EvalFile f = read_eval_file(out, tok.vocab_size());  // what llm.c's loader will read, checked once
        fprintf(stderr, "wrote %s (%zu examples, longest example %d bytes, longest row %d tokens)\n", out.c_str(),
                f.examples.size(), f.longest_example_bytes, eval_longest_row_tokens(f));
    });
}
