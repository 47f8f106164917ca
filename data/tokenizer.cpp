// tokenizer: GPT-2 BPE from the command line (ids identical to tiktoken's "gpt2" encoding).
//   tokenizer encode [--vocab-dir DIR] [--raw] [--allow-special] [-j N] [FILE]   ids of FILE (or stdin)
//   tokenizer decode [--vocab-dir DIR | --bin FILE.bin] [--raw] [--escape | --bytes] [FILE]  text of ids or a shard
//   tokenizer info FILE...                                                       a data shard's header and ids
//   tokenizer export [--vocab-dir DIR] -o OUT.bin                                llm.c tokenizer .bin
//   tokenizer bench  [--vocab-dir DIR] [-j N] [--repeat R] FILE...               encoding speed, MB/s
// See docs/TOKENIZER.md.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/core/read_file.h"
#include "llmc/core/utils.h"
#include "llmc/core/version.h"
#include "llmc/formats/data_shard.h"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/tokenizer/bpe_encoder.h"
#include "llmc/tokenizer/sha256.h"

static const char* kUsage =
    "usage:\n"
    "  tokenizer encode [--vocab-dir DIR] [--raw] [--allow-special] [-j N] [FILE]\n"
    "      writes the token ids of FILE (default: stdin) one per line, or with --raw as little-endian uint16.\n"
    "      <|endoftext|> in the text is ordinary text unless --allow-special. -j: threads (default: all cores).\n"
    "  tokenizer decode [--vocab-dir DIR | --bin TOKENIZER.bin] [--raw] [--escape | --bytes] [FILE]\n"
    "      reads ids (one per line / whitespace separated, or --raw uint16) or a data shard (a .bin that\n"
    "      data/prepro or llm.c wrote, told by its header's magic: the header is checked and skipped) and\n"
    "      writes the text: the exact bytes, except on a terminal, where control characters and invalid\n"
    "      UTF-8 are shown as \\xNN. --escape: escape them whatever the output is; --bytes: exact bytes even\n"
    "      on a terminal.\n"
    "  tokenizer info FILE...\n"
    "      prints each data shard's header (magic, version, token count) and, from reading every token,\n"
    "      the count and the largest id.\n"
    "  tokenizer export [--vocab-dir DIR] -o OUT.bin\n"
    "      writes the llm.c tokenizer file (version 2, with the EOT id) for decoding in train_gpt2cu.\n"
    "  tokenizer bench [--vocab-dir DIR] [-j N] [--repeat R] FILE...\n"
    "      encodes the documents of FILEs (split at blank lines) on 1 thread and on N threads (default: all\n"
    "      cores), R times each (default 5); prints the median's MB/s.\n"
    "  DIR holds encoder.json and vocab.bpe (default: data/cache/gpt2, filled by `make data`).\n"
    "  tokenizer --help | --version    this, or the program and the commit it was built from\n";

// How decode writes the text: exact bytes, or escaped for a terminal (control characters and invalid
// UTF-8 as \xNN, llmc/formats/tokenizer_file.h append_printable). Auto: escaped when stdout is a terminal.
enum class DecodeOutput { Auto, Escape, Bytes };

struct Options {
    std::string command, vocab_dir = "data/cache/gpt2", bin, output;
    bool raw = false, allow_special = false;
    DecodeOutput decode_output = DecodeOutput::Auto;
    int threads = 0, repeat = 5;
    std::vector<std::string> files;
};

static int parse_int_arg(const std::string& flag, const char* value, int lo) {
    char* end = nullptr;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || v < lo || v > 1000000) {
        throw UsageError(flag + ": needs an integer in [" + std::to_string(lo) + ", 1000000], got '" + value + "'");
    }
    return (int)v;
}

static Options parse_args(int argc, char** argv) {
    if (argc < 2) throw UsageError("command: missing (encode, decode, info, export or bench)");
    Options o;
    o.command = argv[1];
    exit_on_help_or_version(o.command, kUsage, "tokenizer");
    if (o.command != "encode" && o.command != "decode" && o.command != "info" && o.command != "export" &&
        o.command != "bench") {
        throw UsageError(o.command + ": unknown command (encode, decode, info, export or bench)");
    }
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) throw UsageError(a + ": needs a value");
            return argv[++i];
        };
        exit_on_help_or_version(a, kUsage, "tokenizer");
        if (a == "--vocab-dir") {
            o.vocab_dir = value();
        } else if (a == "--bin" && o.command == "decode") {
            o.bin = value();
        } else if (a == "-o" && o.command == "export") {
            o.output = value();
        } else if (a == "--raw" && (o.command == "encode" || o.command == "decode")) {
            o.raw = true;
        } else if ((a == "--escape" || a == "--bytes") && o.command == "decode") {
            DecodeOutput d = a == "--escape" ? DecodeOutput::Escape : DecodeOutput::Bytes;
            if (o.decode_output != DecodeOutput::Auto && o.decode_output != d) {
                throw UsageError(a + ": give at most one of --escape and --bytes");
            }
            o.decode_output = d;
        } else if (a == "--allow-special" && o.command == "encode") {
            o.allow_special = true;
        } else if (a == "-j" && (o.command == "encode" || o.command == "bench")) {
            o.threads = parse_int_arg(a, value(), 1);
        } else if (a == "--repeat" && o.command == "bench") {
            o.repeat = parse_int_arg(a, value(), 1);
        } else if (a.size() > 1 && a[0] == '-') {
            throw UsageError(a + ": unknown option for '" + o.command + "'");
        } else {
            o.files.push_back(a);
        }
    }
    if (o.command == "export" && o.output.empty()) throw UsageError("-o: missing (export writes the file given by -o OUT.bin)");
    if ((o.command == "encode" || o.command == "decode") && o.files.size() > 1) throw UsageError(o.files[1] + ": " + o.command + " takes at most one FILE");
    if ((o.command == "bench" || o.command == "info") && o.files.empty()) {
        throw UsageError("FILE: missing (" + o.command + " needs at least one)");
    }
    if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
    return o;
}

static std::string read_input(const std::vector<std::string>& files) {
    return files.empty() ? read_stdin_bytes() : read_file_bytes(files[0]);
}

static void write_stdout(const std::string& s) {
    if (!s.empty() && fwrite(s.data(), 1, s.size(), stdout) != s.size()) throw FileError("<stdout>: write failed");
    if (fflush(stdout) != 0) throw FileError("<stdout>: write failed");
}

static void cmd_encode(const Options& o) {
    BPETokenizer tok = BPETokenizer::load(o.vocab_dir);
    std::string text = read_input(o.files);
    std::vector<int> ids = bpe_encode_parallel(tok, text, o.threads, o.allow_special);
    std::string out;
    if (o.raw) {
        if (tok.vocab_size() > 65536) throw FileError(o.vocab_dir + ": vocabulary too large for --raw uint16 ids");
        out.resize(ids.size() * 2);
        for (size_t i = 0; i < ids.size(); i++) {
            out[2 * i] = (char)(ids[i] & 0xFF);
            out[2 * i + 1] = (char)((ids[i] >> 8) & 0xFF);
        }
    } else {
        out.reserve(ids.size() * 6);
        char buf[16];
        for (int id : ids) {
            int n = snprintf(buf, sizeof(buf), "%d\n", id);
            out.append(buf, (size_t)n);
        }
    }
    write_stdout(out);
}

static void cmd_decode(const Options& o) {
    std::vector<std::string> tokens;
    if (!o.bin.empty()) tokens = read_tokenizer_file(o.bin).tokens;
    else tokens = BPETokenizer::load(o.vocab_dir).tokens();
    std::string input = read_input(o.files);
    const std::string source = o.files.empty() ? "<stdin>" : o.files[0];
    std::vector<int> ids;
    if (starts_with_shard_magic(input)) {  // whatever --raw says: no GPT-2 id stream begins with it (id 55432)
        for (uint16_t t : shard_tokens_from_bytes(source, input)) ids.push_back(t);
    } else if (o.raw) {
        if (input.size() % 2 != 0) throw FileError(source + ": odd number of bytes, not a stream of uint16 ids");
        ids.resize(input.size() / 2);
        for (size_t i = 0; i < ids.size(); i++) {
            ids[i] = (unsigned char)input[2 * i] | ((unsigned char)input[2 * i + 1] << 8);
        }
    } else {
        size_t i = 0, n = input.size();
        while (i < n) {
            if (isspace((unsigned char)input[i])) { i++; continue; }
            size_t start = i;
            int64_t v = 0;
            while (i < n && input[i] >= '0' && input[i] <= '9') {
                if (v <= (int64_t)tokens.size()) v = v * 10 + (input[i] - '0');  // stops growing once out of range
                i++;
            }
            if (i == start || (i < n && !isspace((unsigned char)input[i]))) {
                throw FileError(source + ": byte " + std::to_string(start) + ": expected a token id (a non-negative integer)");
            }
            if (v >= (int64_t)tokens.size()) {
                std::string digits = input.substr(start, std::min<size_t>(i - start, 24));
                if (i - start > 24) digits += "... (" + std::to_string(i - start) + " digits)";
                throw FileError(source + ": byte " + std::to_string(start) + ": token id " + digits +
                                " is outside the vocabulary (ids 0.." + std::to_string(tokens.size() - 1) + ")");
            }
            ids.push_back((int)v);
        }
    }
    std::string text;
    try {
        BPETokenizer::decode_with(tokens, ids.data(), ids.size(), text);
    } catch (const std::out_of_range& e) {
        throw FileError(source + ": " + e.what());
    }
    const bool escape = o.decode_output == DecodeOutput::Escape ||
                        (o.decode_output == DecodeOutput::Auto && isatty(STDOUT_FILENO));
    write_stdout(escape ? printable_bytes(text) : text);
}

// Each shard's header as written and what reading every token finds.
static void cmd_info(const Options& o) {
    for (const std::string& path : o.files) {
        const ShardTokenScan scan = scan_shard_tokens(path);  // checks the header and the length first
        printf("%s: header: magic %d (data shard), version %d, %lld tokens; %lld bytes, as the header says; "
               "tokens read: %lld, largest id %d\n", path.c_str(), kShardMagic, kShardVersion,
               (long long)scan.num_tokens, (long long)shard_file_bytes(scan.num_tokens), (long long)scan.num_tokens,
               scan.max_token);
    }
}

static void cmd_export(const Options& o) {
    BPETokenizer tok = BPETokenizer::load(o.vocab_dir);
    TokenizerFile f;
    f.tokens = tok.tokens();
    f.eot_token = tok.eot_token();
    write_tokenizer_file(o.output, f);
    fprintf(stderr, "wrote %s: %d tokens, eot %d\n", o.output.c_str(), tok.vocab_size(), tok.eot_token());
}

// Documents as llm.c's Tiny Shakespeare script makes them: split after each "\n\n".
static std::vector<std::string_view> split_documents(std::string_view text) {
    std::vector<std::string_view> docs;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t hit = text.find("\n\n", pos);
        size_t end = hit == std::string_view::npos ? text.size() : hit + 2;
        docs.push_back(text.substr(pos, end - pos));
        pos = end;
    }
    return docs;
}

static void cmd_bench(const Options& o) {
    BPETokenizer tok = BPETokenizer::load(o.vocab_dir);
    std::string all;
    for (const auto& f : o.files) all += read_input({f});
    std::vector<std::string_view> docs = split_documents(all);
    using Clock = std::chrono::steady_clock;
    auto run = [&](int threads, std::vector<std::vector<int>>& ids) {
        ids.assign(docs.size(), {});
        auto t0 = Clock::now();
        bpe_parallel_for(tok, docs.size(), threads, [&](size_t i, BPEEncoder& enc) {
            ids[i].reserve(docs[i].size() / 3 + 16);
            enc.encode_ordinary(docs[i], ids[i]);
        });
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    std::vector<int> thread_counts = {1};
    if (o.threads > 1) thread_counts.push_back(o.threads);
    for (int threads : thread_counts) {
        std::vector<double> times;
        std::vector<std::vector<int>> ids;
        for (int r = 0; r < o.repeat; r++) times.push_back(run(threads, ids));  // fresh caches each run
        std::sort(times.begin(), times.end());
        double median = times[times.size() / 2];
        std::vector<int> flat;
        for (auto& d : ids) flat.insert(flat.end(), d.begin(), d.end());
        printf("ours threads=%d docs=%zu bytes=%zu tokens=%zu median_s=%.4f MB/s=%.2f sha256_le32=%s\n", threads,
               docs.size(), all.size(), flat.size(), median, all.size() / median / 1e6,
               sha256_of_ids_le32(flat.data(), flat.size()).c_str());
    }
}

int main(int argc, char** argv) {
    return run_tool("tokenizer", [&] {
        Options o = parse_args(argc, argv);
        if (o.command == "encode") cmd_encode(o);
        else if (o.command == "decode") cmd_decode(o);
        else if (o.command == "info") cmd_info(o);
        else if (o.command == "export") cmd_export(o);
        else cmd_bench(o);
    });
}
