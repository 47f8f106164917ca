// How the targets that need more than one file's bytes cut their input, in one place for the targets
// (which unpack) and tests/fuzz/make_seeds.cpp (which packs the seed corpus). Multi-byte numbers are
// little-endian; missing bytes read as zero, so every input unpacks to something.
//   fuzz_dataloader  LoaderInput: 20 bytes of settings, [104 bytes DataLoaderState], shards
//   fuzz_debug_state GPT2Config as 6 int32 (maxT V Vp L NH C), then the debug-state file
//   fuzz_bpe_encode  u8 merges, u8 eot slot, u8 options, merges x (u16 left, u16 right), then the text
//   fuzz_prepro_input u8 flags (1 = JSONL, 2 = split on blank lines), u32 base offset, then the file
//   fuzz_jsonl_stream u8 name (0 .jsonl, 1 .jsonl.gz, 2 .jsonl.zst, 3 .txt), u16 batch bytes - 1, then the file
//   fuzz_train_args  argv[1..] separated by NUL bytes
//   fuzz_json        u8 mode, then the text
// And the synthetic GPT-2-style vocabulary (encoder.json + vocab.bpe) the tokenizer targets load, and the
// text of a bf16 error record (the format's writer is Python's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmc/data/dataloader.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/tokenizer/bpe_encoder.h"
#include "reference/bf16_error.h"
#include "tests/fuzz/fuzz_common.h"

namespace fuzz {

struct ByteReader {
    const uint8_t* p;
    size_t n;
    template <typename T>
    T get() {
        T v{};
        const size_t k = std::min(sizeof(T), n);
        memcpy(&v, p, k);
        p += k;
        n -= k;
        return v;
    }
    std::string_view take(size_t k) {
        k = std::min(k, n);
        std::string_view s((const char*)p, k);
        p += k;
        n -= k;
        return s;
    }
    std::string_view rest() { return take(n); }
};

struct ByteWriter {
    std::string out;
    template <typename T>
    void put(T v) { out.append((const char*)&v, sizeof(T)); }
    void bytes(std::string_view s) { out.append(s.data(), s.size()); }
};

// ---- fuzz_dataloader: DataLoader settings, an optional saved state to restore, and 1..4 shards.
// The settings may be invalid (B = 0, rank >= processes...): the constructor's std::invalid_argument is
// documented. The shards are the files shard_0.bin... matched by "<dir>/shard_*.bin".
struct LoaderInput {
    int B = 1, T = 1, num_processes = 1, process_rank = 0, micro_steps = 1;
    bool shuffle = false;
    int vocab_size = -1;  // -1: no token check
    uint64_t seed = 0;
    int steps = 0;        // next_batch() calls
    bool restore = false;
    DataLoaderState state{};
    std::vector<std::string> shards;
};

enum : uint8_t { kLoaderShuffle = 1, kLoaderVocabCheck = 2, kLoaderRestore = 4 };

inline LoaderInput unpack_loader_input(const uint8_t* data, size_t size) {
    ByteReader r{data, size};
    LoaderInput in;
    in.B = r.get<uint8_t>() % 9;
    in.T = r.get<uint8_t>() % 17;
    in.num_processes = r.get<uint8_t>() % 5;
    in.process_rank = r.get<uint8_t>() % 5;
    const uint8_t flags = r.get<uint8_t>();
    const int num_shards = r.get<uint8_t>() % 4 + 1;
    in.steps = r.get<uint8_t>() % 64;
    in.micro_steps = r.get<uint8_t>() % 3 + 1;  // next_batch() calls per window
    in.seed = r.get<uint64_t>();
    const int32_t vocab = r.get<int32_t>();
    in.shuffle = flags & kLoaderShuffle;
    in.vocab_size = flags & kLoaderVocabCheck ? vocab : -1;
    in.restore = flags & kLoaderRestore;
    if (in.restore) in.state = r.get<DataLoaderState>();
    for (int i = 0; i < num_shards; i++) {
        const size_t len = i + 1 < num_shards ? r.get<uint32_t>() : r.n;
        in.shards.emplace_back(r.take(len));
    }
    return in;
}

inline std::string pack_loader_input(const LoaderInput& in) {
    ByteWriter w;
    w.put<uint8_t>((uint8_t)in.B);
    w.put<uint8_t>((uint8_t)in.T);
    w.put<uint8_t>((uint8_t)in.num_processes);
    w.put<uint8_t>((uint8_t)in.process_rank);
    w.put<uint8_t>((uint8_t)((in.shuffle ? kLoaderShuffle : 0) | (in.vocab_size != -1 ? kLoaderVocabCheck : 0) |
                             (in.restore ? kLoaderRestore : 0)));
    w.put<uint8_t>((uint8_t)(in.shards.size() - 1));
    w.put<uint8_t>((uint8_t)in.steps);
    w.put<uint8_t>((uint8_t)(in.micro_steps - 1));
    w.put<uint64_t>(in.seed);
    w.put<int32_t>(in.vocab_size);
    if (in.restore) w.put(in.state);
    for (size_t i = 0; i < in.shards.size(); i++) {
        if (i + 1 < in.shards.size()) w.put<uint32_t>((uint32_t)in.shards[i].size());
        w.bytes(in.shards[i]);
    }
    return w.out;
}

// ---- fuzz_debug_state: the model shape the reader is given, then the file.
inline GPT2Config unpack_config(ByteReader& r) {
    GPT2Config c;
    c.max_seq_len = r.get<int32_t>();
    c.vocab_size = r.get<int32_t>();
    c.padded_vocab_size = r.get<int32_t>();
    c.num_layers = r.get<int32_t>();
    c.num_heads = r.get<int32_t>();
    c.channels = r.get<int32_t>();
    return c;
}
inline void pack_config(ByteWriter& w, const GPT2Config& c) {
    for (int v : {c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels}) {
        w.put<int32_t>(v);
    }
}

// ---- the synthetic vocabulary: tokens 0..255 are the single bytes; each merge of two tokens whose
// concatenation is new becomes the next token (its rank); <|endoftext|> takes id 256 + eot_slot % (merges + 1).
// A merge that would repeat a token, or spell "<|endoftext|>" (a key the format reserves), is skipped.
struct SyntheticVocab {
    std::vector<std::string> tokens;  // by id; the EOT entry holds "<|endoftext|>"
    int eot = -1;
    std::string encoder_json, vocab_bpe;
};

class VocabBuilder {
public:
    VocabBuilder() {
        for (int b = 0; b < 256; b++) add(std::string(1, (char)b));
    }
    size_t size() const { return tokens_.size(); }
    size_t num_merges() const { return merges_.size(); }
    // Index (before the EOT is placed) of a token's bytes, -1 if it is none.
    int index_of(const std::string& bytes) const {
        auto it = index_.find(bytes);
        return it == index_.end() ? -1 : it->second;
    }
    bool merge(const std::string& left, const std::string& right) {
        const std::string both = left + right;
        if (index_of(left) < 0 || index_of(right) < 0 || index_of(both) >= 0 || both == BPETokenizer::kEndOfText) {
            return false;
        }
        merges_.emplace_back(left, right);
        add(both);
        return true;
    }
    bool merge_ids(uint32_t left, uint32_t right) {
        return merge(std::string(tokens_[left % size()]), std::string(tokens_[right % size()]));
    }

    SyntheticVocab finish(unsigned eot_slot) const {
        SyntheticVocab v;
        v.eot = 256 + (int)(eot_slot % (merges_.size() + 1));
        v.tokens = tokens_;
        v.tokens.insert(v.tokens.begin() + v.eot, BPETokenizer::kEndOfText);
        uint32_t b2u[256];
        gpt2_byte_to_unicode(b2u);
        auto printable = [&](const std::string& bytes) {  // GPT-2's form: every byte one code point < U+0800
            std::string s;
            for (unsigned char c : bytes) {
                const uint32_t cp = b2u[c];
                if (cp < 0x80) s += (char)cp;
                else { s += (char)(0xC0 | (cp >> 6)); s += (char)(0x80 | (cp & 0x3F)); }
            }
            return s;
        };
        auto json_string = [](const std::string& s) {  // printable forms hold no control characters
            std::string q = "\"";
            for (char c : s) {
                if (c == '"' || c == '\\') q += '\\';
                q += c;
            }
            return q + "\"";
        };
        v.encoder_json = "{";
        for (size_t id = 0; id < v.tokens.size(); id++) {
            if (id) v.encoder_json += ", ";
            const std::string key = (int)id == v.eot ? v.tokens[id] : printable(v.tokens[id]);
            v.encoder_json += json_string(key) + ": " + std::to_string(id);
        }
        v.encoder_json += "}";
        v.vocab_bpe = "#version: 0.2\n";
        for (const auto& [l, r] : merges_) v.vocab_bpe += printable(l) + " " + printable(r) + "\n";
        return v;
    }

private:
    void add(const std::string& bytes) {
        index_.emplace(bytes, (int)tokens_.size());
        tokens_.push_back(bytes);
    }
    std::vector<std::string> tokens_;
    std::unordered_map<std::string, int> index_;
    std::vector<std::pair<std::string, std::string>> merges_;
};

// The fixed vocabulary of the encoder.json and vocab.bpe targets (each fuzzes one file, the other is this).
inline SyntheticVocab demo_vocab() {
    VocabBuilder b;
    const char* merges[][2] = {
        {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "a"}, {"e", "r"}, {"o", "n"}, {" ", "s"},
        {"r", "e"}, {"a", "t"}, {"in", "g"}, {" ", " "}, {"  ", "  "}, {"    ", "    "}, {"'", "s"},
        {"\xC3", "\xA9"}, {"1", "2"}, {"\n", "\n"}, {" the", " "}, {"\"", "\\"},
    };
    for (const auto& m : merges) b.merge(m[0], m[1]);
    return b.finish((unsigned)b.num_merges());  // EOT last, as in GPT-2
}

// The path of the demo vocabulary's "encoder.json" or "vocab.bpe", written once to the scratch directory;
// the demo vocabulary must load (else every input would fail for the other file's sake, unnoticed).
inline std::string demo_vocab_file(const std::string& name) {
    static const std::string dir = [] {
        const SyntheticVocab v = demo_vocab();
        const std::string json = write_scratch_file("demo_encoder.json", v.encoder_json);
        const std::string bpe = write_scratch_file("demo_vocab.bpe", v.vocab_bpe);
        BPETokenizer check(json, bpe);  // a FileError here is a finding
        return scratch_dir();
    }();
    return dir + (name == "encoder.json" ? "/demo_encoder.json" : "/demo_vocab.bpe");
}

// Loads encoder.json + vocab.bpe with the real loader (a FileError is expected); a vocabulary that loads must
// encode text (ASCII, other UTF-8, invalid UTF-8, long runs, "<|endoftext|>") to ids it can decode back.
inline void load_and_check_bpe(const std::string& encoder_json, const std::string& vocab_bpe) {
    std::unique_ptr<BPETokenizer> tok;
    if (!accepts([&] { tok = std::make_unique<BPETokenizer>(encoder_json, vocab_bpe); })) return;
    const int n = tok->vocab_size();
    FUZZ_REQUIRE(n >= 257 && tok->eot_token() >= 0 && tok->eot_token() < n, "vocab_size %d, eot %d", n, tok->eot_token());
    const std::string text = "The cat's 12 hats\n\n  caf\xC3\xA9 \xFF\xC3<|endoftext|>" + std::string(300, ' ') + "in!";
    BPEEncoder enc(*tok);
    for (bool special : {false, true}) {
        std::vector<int> ids;
        enc.encode(text, ids, special);
        for (int id : ids) FUZZ_REQUIRE(id >= 0 && id < n, "encode gave id %d of %d", id, n);
        FUZZ_REQUIRE(tok->decode(ids.data(), ids.size()) == text, "decode(encode(text)) != text");
    }
}

// ---- fuzz_bpe_encode: a vocabulary from the input's merges, then text to encode.
struct EncodeInput {
    SyntheticVocab vocab;
    bool allow_special = false;
    size_t chunk_bytes = 1;  // for bpe_encode_parallel
    std::string_view text;
};

inline EncodeInput unpack_encode_input(const uint8_t* data, size_t size) {
    ByteReader r{data, size};
    EncodeInput in;
    const int merges = r.get<uint8_t>();
    const unsigned eot_slot = r.get<uint8_t>();
    const uint8_t options = r.get<uint8_t>();
    in.allow_special = options & 1;
    in.chunk_bytes = (size_t)(options >> 1) + 1;
    VocabBuilder b;
    for (int i = 0; i < merges; i++) {
        const uint16_t left = r.get<uint16_t>(), right = r.get<uint16_t>();
        b.merge_ids(left, right);
    }
    in.vocab = b.finish(eot_slot);
    in.text = r.rest();
    return in;
}

// ---- fuzz_train_args
inline std::vector<std::string> unpack_argv(const uint8_t* data, size_t size, size_t max_args) {
    std::vector<std::string> args{"train_gpt2cu"};
    std::string_view s((const char*)data, size);
    while (!s.empty() && args.size() <= max_args) {
        const size_t nul = s.find('\0');
        args.emplace_back(s.substr(0, nul));
        s = nul == std::string_view::npos ? std::string_view() : s.substr(nul + 1);
    }
    return args;
}

// ---- fuzz_bf16_error: a record as scripts/reference/train_gpt2.py writes it (values as the floats the reader keeps).
inline std::string format_bf16_error(const PyTorchBf16Error& e) {
    std::string s = "# PyTorch's bf16 error\ngpt2_bf16_error " + std::to_string(kBf16ErrorVersion) + "\nsteps " +
                    std::to_string(e.trajectory_abs.size()) + "\n";
    auto line = [&](const std::string& key, const Bf16ErrorPair& p) {
        char buf[64];
        snprintf(buf, sizeof(buf), " %.9g %.9g\n", (double)(float)p.all_bf16, (double)(float)p.autocast);
        s += key + buf;
    };
    line("logits_rel_l2", e.logits_rel_l2);
    line("loss_abs", e.loss_abs);
    const auto table = gpt2_parameter_table(GPT2Config{1, 1, 1, 1, 1, 1});
    for (size_t i = 0; i < table.size(); i++) line(std::string("grad_rel_l2 ") + table[i].name, e.grad_rel_l2[i]);
    for (size_t i = 0; i < e.trajectory_abs.size(); i++) line("trajectory_abs " + std::to_string(i), e.trajectory_abs[i]);
    return s;
}

}  // namespace fuzz
