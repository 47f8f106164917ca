// prepro: text -> GPT-2 token shards (the 20240520 format of llmc/data_shard.h), all in C++.
//   data/prepro [options] INPUT...      (see kUsage; docs/TOKENIZER.md)
// Each document becomes <|endoftext|> followed by its ids (tiktoken's encode_ordinary), as llm.c's
// scripts do. Documents are encoded on all cores; the output depends only on the inputs and the
// options (never on the thread count): results are written in input order.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "data/prepro_input.h"
#include "data/tokenizer/bpe.h"
#include "llmc/data_shard.h"
#include "llmc/utils.h"

static const char* kUsage =
    "usage: data/prepro [options] INPUT...\n"
    "  INPUT: a text file (one document), a directory (every regular file below it, sorted by path),\n"
    "         or a .jsonl file (one JSON object per line; its \"text\" string is a document).\n"
    "  -o PREFIX            output prefix (default data/out/data): PREFIX_val_000000.bin, PREFIX_train_000000.bin, ...\n"
    "  --vocab-dir DIR      encoder.json + vocab.bpe (default data/cache/gpt2)\n"
    "  --jsonl              read every INPUT file as JSONL, whatever its name\n"
    "  --split-blank-lines  cut text files into documents after every \"\\n\\n\" (llm.c's Tiny Shakespeare rule)\n"
    "  --val-tokens N       the first N tokens of the stream form the val split (cut mid-document, as llm.c)\n"
    "  --val-fraction F     documents starting in the first F of the input bytes form the val split\n"
    "  --val-file FILE      the val split is FILE's documents; INPUTs are all train\n"
    "                       (no val option: no val split)\n"
    "  --shard-tokens N     tokens per shard (default 100000000)\n"
    "  -j N                 threads (default: all cores)\n";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Options {
    std::vector<std::string> inputs;
    std::string prefix = "data/out/data", vocab_dir = "data/cache/gpt2", val_file;
    bool jsonl = false, split_blank_lines = false;
    int64_t val_tokens = -1, shard_tokens = 100000000;
    double val_fraction = -1;
    int threads = 0;
};

static Options parse_args(int argc, char** argv) {
    Options o;
    std::string val_mode;  // the val option given, if any
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError(a + ": needs a value");
            return argv[++i];
        };
        auto int_value = [&](int64_t lo) {
            std::string v = value();
            char* end = nullptr;
            long long x = strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || x < lo) throw UsageError(a + ": needs an integer >= " + std::to_string(lo) + ", got '" + v + "'");
            return (int64_t)x;
        };
        auto set_val_mode = [&]() {
            if (!val_mode.empty()) throw UsageError(a + ": give at most one of --val-tokens, --val-fraction, --val-file (" + val_mode + " given too)");
            val_mode = a;
        };
        if (a == "-h" || a == "--help") {
            fputs(kUsage, stdout);
            exit(0);
        } else if (a == "-o") {
            o.prefix = value();
        } else if (a == "--vocab-dir") {
            o.vocab_dir = value();
        } else if (a == "--jsonl") {
            o.jsonl = true;
        } else if (a == "--split-blank-lines") {
            o.split_blank_lines = true;
        } else if (a == "--val-tokens") {
            set_val_mode();
            o.val_tokens = int_value(0);
        } else if (a == "--val-fraction") {
            set_val_mode();
            std::string v = value();
            char* end = nullptr;
            o.val_fraction = strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(o.val_fraction >= 0 && o.val_fraction < 1)) {
                throw UsageError("--val-fraction: needs a number in [0, 1), got '" + v + "'");
            }
        } else if (a == "--val-file") {
            set_val_mode();
            o.val_file = value();
        } else if (a == "--shard-tokens") {
            o.shard_tokens = int_value(1);
        } else if (a == "-j") {
            o.threads = (int)std::min<int64_t>(int_value(1), 4096);
        } else if (a.size() > 1 && a[0] == '-') {
            throw UsageError(a + ": unknown option");
        } else {
            o.inputs.push_back(a);
        }
    }
    if (o.inputs.empty()) throw UsageError("INPUT: missing (a text file, a directory or a .jsonl file)");
    if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
    return o;
}

// The progress bar is drawn (on stderr, redrawn in place with \r) only when stderr is a terminal, so
// a log or a test sees just the result lines or the one error line.
static bool g_progress_line_open = false;
static void end_progress_line() {
    if (g_progress_line_open) fputc('\n', stderr);
    g_progress_line_open = false;
}

struct Progress {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now(), last = start;
    int64_t total_bytes = 0, done_bytes = 0, tokens = 0;
    const bool enabled = isatty(STDERR_FILENO);
    void update(bool final) {
        if (!enabled) return;
        g_progress_line_open = true;
        auto now = Clock::now();
        if (!final && std::chrono::duration<double>(now - last).count() < 0.25) return;
        last = now;
        double secs = std::max(1e-9, std::chrono::duration<double>(now - start).count());
        double frac = total_bytes > 0 ? (double)done_bytes / (double)total_bytes : 1.0;
        int filled = (int)(frac * 30);
        fprintf(stderr, "\r[%.*s%*s] %5.1f%% %8.2f MB/s %12lld tokens %7.1f s", filled, "==============================",
                30 - filled, "", 100 * frac, done_bytes / secs / 1e6, (long long)tokens, secs);
        fflush(stderr);
    }
};

// A split (train or val) written as consecutive shards of at most shard_tokens tokens.
class ShardedOutput {
public:
    ShardedOutput(std::string prefix, std::string split, int64_t shard_tokens)
        : prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens) {}
    void append(const uint16_t* t, int64_t n) {
        while (n > 0) {
            if (!writer_) open_next();
            int64_t room = shard_tokens_ - writer_->num_tokens();
            int64_t take = std::min(room, n);
            writer_->append(t, take);
            t += take;
            n -= take;
            total_ += take;
            if (writer_->num_tokens() == shard_tokens_) close();
        }
    }
    void close() {
        if (!writer_) return;
        writer_->commit();
        end_progress_line();
        fprintf(stderr, "wrote %s (%lld tokens)\n", path_.c_str(), (long long)writer_->num_tokens());
        writer_.reset();
    }
    int64_t total() const { return total_; }
    int shards() const { return next_index_; }

private:
    std::string prefix_, split_, path_;
    int64_t shard_tokens_, total_ = 0;
    int next_index_ = 0;
    std::unique_ptr<ShardWriter> writer_;
    void open_next() {
        char name[32];
        snprintf(name, sizeof(name), "_%06d.bin", next_index_++);
        path_ = prefix_ + "_" + split_ + name;
        writer_ = std::make_unique<ShardWriter>(path_);
    }
};

int main(int argc, char** argv) {
    try {
        Options o = parse_args(argc, argv);
        BPETokenizer tok = BPETokenizer::load(o.vocab_dir);
        if (tok.vocab_size() > 65536) throw FileError(o.vocab_dir + ": vocabulary does not fit uint16 shards");
        const uint16_t eot = (uint16_t)tok.eot_token();

        // The input files, val file first (it is the start of the stream when given).
        std::vector<std::string> files;
        size_t num_val_files = 0;
        if (!o.val_file.empty()) {
            files = list_input_files(o.val_file);
            num_val_files = files.size();
        }
        for (const auto& in : o.inputs) {
            std::vector<std::string> more = list_input_files(in);
            files.insert(files.end(), more.begin(), more.end());
        }
        Progress progress;
        std::vector<int64_t> file_offset;
        for (const auto& f : files) {
            file_offset.push_back(progress.total_bytes);
            progress.total_bytes += file_size_or_throw(f);
        }
        int64_t val_bytes_limit = o.val_fraction >= 0 ? (int64_t)(o.val_fraction * (double)progress.total_bytes) : 0;

        ShardedOutput val(o.prefix, "val", o.shard_tokens), train(o.prefix, "train", o.shard_tokens);
        const size_t kChunk = 1 << 20;  // long documents are encoded in ~1 MB pieces in parallel
        for (size_t fi = 0; fi < files.size(); fi++) {
            const bool jsonl = o.jsonl || is_jsonl_path(files[fi]);
            FileDocuments d = parse_documents(read_input_file(files[fi]), files[fi], jsonl, o.split_blank_lines, file_offset[fi]);
            // Work items: (document, chunk) in order; a chunk boundary is a safe split point.
            struct Item { size_t doc; std::string_view text; bool doc_start; };
            std::vector<Item> items;
            for (size_t k = 0; k < d.docs.size(); k++) {
                std::string_view doc = d.text(d.docs[k]);
                size_t pos = 0;
                do {
                    size_t end = std::min(doc.size(), pos + kChunk);
                    while (end < doc.size() && !is_safe_split_point(doc, end)) end++;
                    items.push_back({k, doc.substr(pos, end - pos), pos == 0});
                    pos = end;
                } while (pos < doc.size());
            }
            // Encode in batches of ~64 MB of text, so memory stays bounded and progress moves.
            const size_t kBatchBytes = 64 << 20;
            for (size_t b0 = 0, b1 = 0; b0 < items.size(); b0 = b1) {
                size_t batch_bytes = 0;
                for (b1 = b0; b1 < items.size() && batch_bytes < kBatchBytes; b1++) batch_bytes += items[b1].text.size();
                std::vector<std::vector<int>> ids(b1 - b0);
                bpe_parallel_for(tok, b1 - b0, o.threads, [&](size_t i, BPEEncoder& enc) {
                    enc.encode_ordinary(items[b0 + i].text, ids[i]);
                });
                std::vector<uint16_t> buf;
                for (size_t i = b0; i < b1; i++) {
                    const size_t k = items[i].doc;
                    buf.clear();
                    if (items[i].doc_start) buf.push_back(eot);
                    for (int id : ids[i - b0]) buf.push_back((uint16_t)id);
                    // Route to val or train.
                    const uint16_t* t = buf.data();
                    int64_t n = (int64_t)buf.size();
                    bool to_val;
                    if (o.val_tokens >= 0) {
                        int64_t room = std::max<int64_t>(0, o.val_tokens - val.total());
                        int64_t take = std::min(room, n);
                        if (take > 0) val.append(t, take);
                        t += take;
                        n -= take;
                        to_val = false;
                    } else if (!o.val_file.empty()) {
                        to_val = fi < num_val_files;
                    } else if (o.val_fraction >= 0) {
                        to_val = d.docs[k].input_offset < val_bytes_limit;
                    } else {
                        to_val = false;
                    }
                    (to_val ? val : train).append(t, n);
                    progress.tokens += (int64_t)buf.size();
                }
                size_t last_doc = items[b1 - 1].doc;
                int64_t done = (last_doc + 1 < d.docs.size()) ? d.docs[last_doc + 1].input_offset
                                                              : file_offset[fi] + file_size_or_throw(files[fi]);
                progress.done_bytes = done;
                progress.update(false);
            }
            progress.done_bytes = file_offset[fi] + file_size_or_throw(files[fi]);
        }
        progress.update(true);
        if (progress.tokens == 0) throw FileError(files.empty() ? o.inputs[0] : files[0] + ": no documents in the input (empty)");
        val.close();
        train.close();
        end_progress_line();
        fprintf(stderr, "%zu files, %lld bytes -> val %lld tokens in %d shards, train %lld tokens in %d shards\n",
                files.size(), (long long)progress.total_bytes, (long long)val.total(), val.shards(),
                (long long)train.total(), train.shards());
    } catch (const UsageError& e) {
        fprintf(stderr, "error: %s; see data/prepro --help\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        end_progress_line();
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
