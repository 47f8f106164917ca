// gpt2_convert: our GPT-2 model files <-> Hugging Face GPT-2 (transformers' GPT2LMHeadModel, safetensors).
//   ./gpt2_convert to-hf MODEL.bin OUTDIR [--vocab-dir DIR]
//   ./gpt2_convert from-hf PATH MODEL.bin [--bf16]
// The mapping and its rules are in llmc/formats/hf_gpt2.h; train_gpt2cu -e reads HF models directly, so from-hf is for
// keeping a converted copy. Errors are one line, "error: <file>: <problem>", exit status 1.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/core/version.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/formats/model_file.h"
#include "llmc/tokenizer/bpe.h"

static const char* kUsage =
    "usage:\n"
    "  gpt2_convert to-hf MODEL.bin OUTDIR [--vocab-dir DIR]\n"
    "      writes OUTDIR/config.json + OUTDIR/model.safetensors, which transformers'\n"
    "      GPT2LMHeadModel.from_pretrained(OUTDIR) loads. fp32 models stay F32, bf16 models stay BF16\n"
    "      (torch_dtype in config.json); wte's padding rows (V..Vp-1) are dropped. With --vocab-dir (a\n"
    "      directory holding encoder.json and vocab.bpe, e.g. data/cache/gpt2) also the tokenizer:\n"
    "      vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json (default: the model only).\n"
    "  gpt2_convert from-hf PATH MODEL.bin [--bf16]\n"
    "      PATH: an HF GPT-2 directory (config.json + model.safetensors, or the sharded\n"
    "      model.safetensors.index.json), or a .safetensors file with config.json beside it. F32, F16 and\n"
    "      BF16 tensors; writes our model file in fp32 (the default), or in bf16 with --bf16 (round to nearest even).\n"
    "  gpt2_convert --help | --version    this, or the program and the commit it was built from\n";

struct Options {
    std::string command, input, output, vocab_dir;
    bool bf16 = false;
};

static Options parse_args(int argc, char** argv) {
    Options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        exit_on_help_or_version(a, kUsage, "gpt2_convert");
        if (a == "--vocab-dir") {
            if (i + 1 >= argc) throw UsageError(a + ": needs a value");
            o.vocab_dir = argv[++i];
        } else if (a == "--bf16") {
            o.bf16 = true;
        } else if (a.size() > 1 && a[0] == '-') {
            throw UsageError(a + ": unknown option");
        } else {
            positional.push_back(a);
        }
    }
    if (positional.empty()) throw UsageError("command: missing (to-hf or from-hf)");
    o.command = positional[0];
    if (o.command != "to-hf" && o.command != "from-hf") throw UsageError(o.command + ": unknown command (to-hf or from-hf)");
    if (positional.size() != 3) throw UsageError(o.command + ": needs exactly two paths, got " + std::to_string(positional.size() - 1));
    o.input = positional[1];
    o.output = positional[2];
    if (o.command == "to-hf" && o.bf16) throw UsageError("--bf16: only for from-hf (to-hf keeps the model's dtype)");
    if (o.command == "from-hf" && !o.vocab_dir.empty()) throw UsageError("--vocab-dir: only for to-hf");
    return o;
}

static void write_text(const std::string& path, const std::string& text) {
    AtomicOutputFile out(path);
    out.write(text.data(), text.size());
    out.commit();
}

// HF's GPT-2 tokenizer files: vocab.json and merges.txt are encoder.json and vocab.bpe byte for byte (checked
// by loading them as our BPE tokenizer, before anything is written); the two small configs name <|endoftext|> as
// bos/eos/unk. Returns the files' contents by name.
static std::vector<std::pair<std::string, std::string>> tokenizer_files(const std::string& vocab_dir, const GPT2Config& c) {
    const BPETokenizer tok = BPETokenizer::load(vocab_dir);
    if (tok.vocab_size() > c.vocab_size) {
        file_error(vocab_dir + "/encoder.json", "has %d tokens, more than the model's vocabulary (V = %d)",
                   tok.vocab_size(), c.vocab_size);
    }
    const std::string eot = "\"<|endoftext|>\"";
    return {
        {"vocab.json", read_file_bytes(vocab_dir + "/encoder.json")},
        {"merges.txt", read_file_bytes(vocab_dir + "/vocab.bpe")},
        {"special_tokens_map.json",
         "{\n  \"bos_token\": " + eot + ",\n  \"eos_token\": " + eot + ",\n  \"unk_token\": " + eot + "\n}\n"},
        {"tokenizer_config.json",
         "{\n  \"add_bos_token\": false,\n  \"add_prefix_space\": false,\n  \"bos_token\": " + eot +
             ",\n  \"eos_token\": " + eot + ",\n  \"errors\": \"replace\",\n  \"model_max_length\": " +
             std::to_string(c.max_seq_len) + ",\n  \"pad_token\": null,\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
             "  \"unk_token\": " + eot + "\n}\n"},
    };
}

static void to_hf(const Options& o) {
    ParamDtype dtype;
    const GPT2Config c = read_model_header(o.input, &dtype);
    std::vector<std::pair<std::string, std::string>> tokenizer;  // checked before anything is written
    if (!o.vocab_dir.empty()) tokenizer = tokenizer_files(o.vocab_dir, c);
    export_hf_gpt2(o.input, o.output);
    printf("wrote %s/model.safetensors (%s) and config.json: L=%d NH=%d C=%d V=%d maxT=%d\n", o.output.c_str(),
           dtype == ParamDtype::BF16 ? "BF16" : "F32", c.num_layers, c.num_heads, c.channels, c.vocab_size, c.max_seq_len);
    for (const auto& [name, text] : tokenizer) {
        write_text(o.output + "/" + name, text);
        printf("wrote %s/%s\n", o.output.c_str(), name.c_str());
    }
}

static void from_hf(const Options& o) {
    const ParamDtype dtype = o.bf16 ? ParamDtype::BF16 : ParamDtype::FP32;
    convert_hf_gpt2(o.input, o.output, dtype);  // a path that is not HF's is an error naming it
    const GPT2Config c = read_model_header(o.output, nullptr);
    printf("wrote %s (%s): L=%d NH=%d C=%d V=%d (Vp=%d) maxT=%d, %zu parameters\n", o.output.c_str(),
           param_dtype_name(dtype), c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size,
           c.max_seq_len, gpt2_num_parameters(c));
}

int main(int argc, char** argv) {
    return run_tool("gpt2_convert", [&] {
        const Options o = parse_args(argc, argv);
        if (o.command == "to-hf") to_hf(o);
        else from_hf(o);
    });
}
