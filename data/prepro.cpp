// prepro: text -> GPT-2 token shards (the 20240520 format of llmc/formats/data_shard.h), all in C++.
//   data/prepro [options] INPUT...      (see kUsage; docs/TOKENIZER.md)
// Each document becomes <|endoftext|> followed by its ids (tiktoken's encode_ordinary), as llm.c's
// scripts do. Documents are encoded on all cores; the output depends only on the inputs and the
// options (never on the thread count): results are written in input order. JSONL (plain, .jsonl.gz,
// .jsonl.zst) is streamed a batch of lines at a time; a text file is read whole.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/prepro_input.h"
#include "llmc/core/utils.h"
#include "llmc/core/version.h"
#include "llmc/formats/data_shard.h"
#include "llmc/tokenizer/bpe_encoder.h"

static const char* kUsage =
    "usage: data/prepro [options] INPUT...\n"
    "  INPUT: a text file (one document), a directory (every regular file below it, sorted by path),\n"
    "         or a .jsonl file (one JSON object per line; its \"text\" string is a document), also gzip- or\n"
    "         zstd-compressed as .jsonl.gz / .jsonl.zst (read as a stream). A file whose content is not what its\n"
    "         name says (compressed or binary data, JSONL in a .txt) is refused in one line.\n"
    "  -o PREFIX            output prefix (default data/out/data): PREFIX_val_000000.bin, PREFIX_train_000000.bin, ...\n"
    "                       Its directories are made. After a run PREFIX_{train,val}_*.bin are exactly that run's\n"
    "                       shards (an earlier run's extra shards are removed); a failed run changes nothing there.\n"
    "  --vocab-dir DIR      encoder.json + vocab.bpe (default data/cache/gpt2)\n"
    "  --jsonl              read every INPUT file as JSONL, whatever its name (gzip or zstd by its content)\n"
    "  --text-field NAME    the JSONL field holding a document's text (default \"text\")\n"
    "  --split-blank-lines  cut text files into documents after every \"\\n\\n\" (llm.c's Tiny Shakespeare rule)\n"
    "  --val-tokens N       the first N tokens of the stream form the val split (cut mid-document, as llm.c)\n"
    "  --val-fraction F     documents starting in the first F of the input bytes form the val split\n"
    "  --val-file FILE      the val split is FILE's documents; INPUTs are all train\n"
    "  --fineweb-layout     llm.c's FineWeb shards (dev/data/fineweb.py): the first --shard-tokens tokens are the\n"
    "                       val shard PREFIX_val_000000.bin, the rest PREFIX_train_000001.bin, _000002, ...\n"
    "                       (no val option: no val split; an empty train split is an error)\n"
    "  --shard-tokens N     tokens per shard (default 100000000, as llm.c's fineweb.py)\n"
    "  --batch-bytes N      text read and encoded per batch (default 67108864); memory follows it\n"
    "  -j N                 threads (default: all cores)\n"
    "  Without a val option there is no val split. -h, --help: this; --version: the program and its commit.\n";

struct Options {
    std::vector<std::string> inputs;
    std::string prefix = "data/out/data", vocab_dir = "data/cache/gpt2", val_file, text_field = "text";
    bool jsonl = false, split_blank_lines = false, fineweb_layout = false;
    int64_t val_tokens = -1, shard_tokens = 100000000, batch_bytes = 64 << 20;
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
        auto int_value = [&](int64_t lo, int64_t hi) {
            std::string v = value();
            char* end = nullptr;
            errno = 0;
            long long x = strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0') throw UsageError(a + ": needs an integer, got '" + v + "'");
            if (errno == ERANGE || x < lo || x > hi) {
                throw UsageError(a + ": " + v + " is out of range (" + std::to_string(lo) + " to " + std::to_string(hi) + ")");
            }
            return (int64_t)x;
        };
        auto set_val_mode = [&]() {
            if (!val_mode.empty()) {
                throw UsageError(a + ": give at most one of --val-tokens, --val-fraction, --val-file, --fineweb-layout (" +
                                 val_mode + " given too)");
            }
            val_mode = a;
        };
        exit_on_help_or_version(a, kUsage, "data/prepro");
        if (a == "-o") {
            o.prefix = value();
        } else if (a == "--vocab-dir") {
            o.vocab_dir = value();
        } else if (a == "--jsonl") {
            o.jsonl = true;
        } else if (a == "--text-field") {
            o.text_field = value();
            if (o.text_field.empty()) throw UsageError("--text-field: needs a non-empty field name");
        } else if (a == "--fineweb-layout") {
            set_val_mode();
            o.fineweb_layout = true;
        } else if (a == "--split-blank-lines") {
            o.split_blank_lines = true;
        } else if (a == "--val-tokens") {
            set_val_mode();
            o.val_tokens = int_value(0, INT64_MAX);
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
            o.shard_tokens = int_value(1, kShardMaxTokens);  // the shard header holds an int32
        } else if (a == "--batch-bytes") {
            o.batch_bytes = int_value(1, (int64_t)1 << 40);
        } else if (a == "-j") {
            o.threads = (int)int_value(1, 4096);
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

// Creates the directories above `prefix` that do not exist yet (mkdir -p of its directory part) and
// returns them, outermost first, so a failed run can remove them again.
static std::vector<std::string> make_parent_directories(const std::string& prefix) {
    std::vector<std::string> created;
    for (size_t slash = prefix.find('/', 1); slash != std::string::npos; slash = prefix.find('/', slash + 1)) {
        const std::string dir = prefix.substr(0, slash);
        if (mkdir(dir.c_str(), 0755) == 0) {
            created.push_back(dir);
        } else if (errno != EEXIST) {
            file_error(dir, "cannot create directory for -o %s (%s)", prefix.c_str(), strerror(errno));
        }
        struct stat st;
        if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) file_error(dir, "not a directory (in -o %s)", prefix.c_str());
    }
    return created;
}

// A split (train or val) written as consecutive shards of at most shard_tokens tokens. Each shard is
// committed under a temporary name (<shard>.incomplete.<pid>) and gets its real name only in
// publish(), once the whole run has succeeded; destroyed before that (an error midway), it removes
// every shard it wrote, so a failed run leaves the prefix as it was.
class ShardedOutput {
public:
    // first_index: the number of the first shard (1 for train in llm.c's FineWeb layout, where 0 is val).
    ShardedOutput(std::string prefix, std::string split, int64_t shard_tokens, int first_index = 0)
        : prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens), first_index_(first_index) {}
    ShardedOutput(const ShardedOutput&) = delete;
    ShardedOutput& operator=(const ShardedOutput&) = delete;
    ~ShardedOutput() {
        writer_.reset();  // an uncommitted shard removes its own temporary file
        for (size_t i = published_; i < shards_.size(); i++) remove(shards_[i].staged.c_str());
    }
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
    // Commits the shard being written (under its temporary name).
    void close() {
        if (!writer_) return;
        writer_->commit();
        shards_.back().tokens = writer_->num_tokens();
        writer_.reset();
    }
    // Renames every shard to its real name (replacing a file of that name).
    void publish() {
        close();
        for (; published_ < shards_.size(); published_++) {
            const Shard& s = shards_[published_];
            if (rename(s.staged.c_str(), s.path.c_str()) != 0) {
                file_error(s.path, "cannot rename %s into place (%s)", s.staged.c_str(), strerror(errno));
            }
            fprintf(stderr, "wrote %s (%lld tokens)\n", s.path.c_str(), (long long)s.tokens);
        }
    }
    int64_t total() const { return total_; }
    int shards() const { return (int)shards_.size(); }
    std::vector<std::string> paths() const {
        std::vector<std::string> p;
        for (const Shard& s : shards_) p.push_back(s.path);
        return p;
    }

private:
    struct Shard {
        std::string path, staged;
        int64_t tokens = 0;
    };
    std::string prefix_, split_;
    int64_t shard_tokens_, total_ = 0;
    int first_index_ = 0;
    std::vector<Shard> shards_;
    size_t published_ = 0;
    std::unique_ptr<ShardWriter> writer_;
    void open_next() {
        char name[32];
        snprintf(name, sizeof(name), "_%06d.bin", first_index_ + (int)shards_.size());
        Shard s;
        s.path = prefix_ + "_" + split_ + name;
        s.staged = s.path + ".incomplete." + std::to_string((long)getpid());
        shards_.push_back(s);
        writer_ = std::make_unique<ShardWriter>(s.staged);
    }
};

// True for the names prepro gives PREFIX's shards: <base>_train_NNNNNN.bin or <base>_val_NNNNNN.bin.
static bool is_shard_name_of(const std::string& name, const std::string& base) {
    if (name.compare(0, base.size() + 1, base + "_") != 0) return false;
    std::string rest = name.substr(base.size() + 1);
    for (const char* split : {"train_", "val_"}) {
        const size_t n = strlen(split);
        if (rest.compare(0, n, split) != 0) continue;
        std::string num = rest.substr(n);
        if (num.size() < 6 + 4 || num.compare(num.size() - 4, 4, ".bin") != 0) return false;
        num.resize(num.size() - 4);
        return num.find_first_not_of("0123456789") == std::string::npos;
    }
    return false;
}

// After a successful run, PREFIX_train_*.bin and PREFIX_val_*.bin must be exactly this run's shards: a
// shard of that name that this run did not write is left from an earlier run into the same prefix (more
// shards, or a val split this run has not), and is removed. Returns the removed paths.
static std::vector<std::string> remove_stale_shards(const std::string& prefix, const std::vector<std::string>& written) {
    const size_t slash = prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash == 0 ? 1 : slash);
    const std::string base = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
    const std::string path_prefix = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
    DIR* d = opendir(dir.c_str());
    if (!d) file_error(dir, "cannot list the directory of -o %s (%s)", prefix.c_str(), strerror(errno));
    std::vector<std::string> stale;
    while (struct dirent* e = readdir(d)) {
        const std::string path = path_prefix + e->d_name;
        if (is_shard_name_of(e->d_name, base) && std::find(written.begin(), written.end(), path) == written.end()) {
            stale.push_back(path);
        }
    }
    closedir(d);
    std::sort(stale.begin(), stale.end());
    for (const std::string& path : stale) {
        if (remove(path.c_str()) != 0) file_error(path, "cannot remove this shard of an earlier run (%s)", strerror(errno));
        fprintf(stderr, "removed %s (a shard of an earlier run into this prefix)\n", path.c_str());
    }
    return stale;
}

int main(int argc, char** argv) {
    return run_tool("data/prepro", [&] {
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
        // Directories made for -o are removed again if the run fails (rmdir: only while empty).
        struct CreatedDirectories {
            std::vector<std::string> dirs;
            bool keep = false;
            ~CreatedDirectories() {
                for (size_t i = dirs.size(); !keep && i-- > 0;) rmdir(dirs[i].c_str());
            }
        } created;
        created.dirs = make_parent_directories(o.prefix);

        // What each file is, before any work: a file prepro would misread stops the run here, in one line.
        std::vector<InputFileKind> kinds;
        for (const auto& f : files) kinds.push_back(check_input_file(f, o.jsonl, o.text_field));
        if (o.fineweb_layout) o.val_tokens = o.shard_tokens;  // shard 0 is val, as llm.c's fineweb.py

        // Progress counts the files' bytes on disk; --val-fraction counts the input stream's (decompressed) bytes.
        Progress progress;
        std::vector<int64_t> file_offset, stream_offset;
        int64_t stream_bytes = 0;
        for (size_t fi = 0; fi < files.size(); fi++) {
            file_offset.push_back(progress.total_bytes);
            stream_offset.push_back(stream_bytes);
            const int64_t size = file_size_or_throw(files[fi]);
            progress.total_bytes += size;
            const bool count_stream = o.val_fraction >= 0 && kinds[fi].compression != Compression::None;
            stream_bytes += count_stream ? decompressed_size(files[fi]) : size;
        }
        int64_t val_bytes_limit = o.val_fraction >= 0 ? (int64_t)(o.val_fraction * (double)stream_bytes) : 0;

        ShardedOutput val(o.prefix, "val", o.shard_tokens), train(o.prefix, "train", o.shard_tokens, o.fineweb_layout ? 1 : 0);
        // One batch of one file's documents: encoded on all cores, written in order to val or train.
        // done_bytes(k) is how far into the input (bytes on disk) the documents before k reach, for progress.
        auto encode_and_route = [&](const FileDocuments& d, size_t fi, const std::function<int64_t(size_t)>& done_bytes) {
            const size_t kChunk = 1 << 20;  // long documents are encoded in ~1 MB pieces in parallel
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
            // Encode in batches of ~--batch-bytes of text, so memory stays bounded and progress moves.
            const size_t kBatchBytes = (size_t)o.batch_bytes;
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
                progress.done_bytes = done_bytes(items[b1 - 1].doc + 1);
                progress.update(false);
            }
        };
        for (size_t fi = 0; fi < files.size(); fi++) {
            const int64_t file_end = file_offset[fi] + file_size_or_throw(files[fi]);
            if (kinds[fi].jsonl) {  // streamed: one batch of lines at a time
                // Reading (decompressing, parsing) the next batch on a thread of its own overlaps encoding this one.
                const size_t kLinesBytes = (size_t)o.batch_bytes;
                JsonlReader reader(files[fi], o.text_field, stream_offset[fi]);
                FileDocuments d, next_d;
                bool have = reader.next(d, kLinesBytes);
                while (have) {
                    const int64_t done = file_offset[fi] + reader.file_bytes_read();
                    bool have_next = false;
                    std::exception_ptr read_error;
                    std::thread read_ahead([&] {
                        try {
                            have_next = reader.next(next_d, kLinesBytes);
                        } catch (...) {
                            read_error = std::current_exception();
                        }
                    });
                    struct Join {  // joined before anything unwinds past it (an error while encoding)
                        std::thread& t;
                        ~Join() {
                            if (t.joinable()) t.join();
                        }
                    } join{read_ahead};
                    encode_and_route(d, fi, [&](size_t) { return done; });
                    read_ahead.join();
                    if (read_error) std::rethrow_exception(read_error);
                    std::swap(d, next_d);
                    have = have_next;
                }
            } else {
                FileDocuments d = parse_documents(read_file_bytes(files[fi]), files[fi], false, o.split_blank_lines,
                                                  stream_offset[fi]);
                encode_and_route(d, fi, [&](size_t k) {
                    return k < d.docs.size() ? file_offset[fi] + (d.docs[k].input_offset - stream_offset[fi]) : file_end;
                });
            }
            progress.done_bytes = file_end;
        }
        progress.update(true);
        end_progress_line();
        if (progress.tokens == 0) {
            if (files.size() == 1) file_error(files[0], "no documents in the input (empty)");
            throw FileError("INPUT: no documents in any of the " + std::to_string(files.size()) + " input files (all empty)");
        }
        if (train.total() == 0) {
            if (o.fineweb_layout) {
                file_error("--fineweb-layout", "the input's %lld tokens fill only the val shard (shard 0 takes the first "
                           "%lld, --shard-tokens), so the train split would be empty",
                           (long long)val.total(), (long long)o.shard_tokens);
            }
            if (o.val_tokens >= 0) {
                file_error("--val-tokens", "%lld takes all %lld tokens of the input, so the train split would be empty",
                           (long long)o.val_tokens, (long long)val.total());
            }
            if (o.val_fraction >= 0) {
                file_error("--val-fraction", "%.9g puts every document into val, so the train split would be empty",
                           o.val_fraction);
            }
            file_error(o.inputs[0], "no documents for the train split (--val-file %s holds all the text)", o.val_file.c_str());
        }
        val.publish();
        train.publish();
        std::vector<std::string> written = val.paths(), train_paths = train.paths();
        written.insert(written.end(), train_paths.begin(), train_paths.end());
        remove_stale_shards(o.prefix, written);
        created.keep = true;
        fprintf(stderr, "%zu files, %lld bytes -> val %lld tokens in %d shards, train %lld tokens in %d shards\n",
                files.size(), (long long)progress.total_bytes, (long long)val.total(), val.shards(),
                (long long)train.total(), train.shards());
    }, end_progress_line);
}
