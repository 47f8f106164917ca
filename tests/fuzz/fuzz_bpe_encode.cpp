// Fuzzes the BPE encoder (BPEEncoder, bpe_encode_parallel and BPETokenizer::decode, llmc/tokenizer/bpe.h)
// on arbitrary bytes with a vocabulary the input also picks: up to 255 merges of earlier tokens and where
// <|endoftext|> sits (fuzz_inputs.h), loaded from encoder.json + vocab.bpe files by the real loader.
// Findings: a crash or sanitizer report, an exception, a leak, a hang, the synthetic vocabulary not loading
// (with <|endoftext|> anywhere from id 256 on; merge ranks skip it),
// an id outside the vocabulary, decode(encode(text)) != text, ids that differ from a plain reference BPE
// (tiktoken's rule: a piece that is a token is that token, else merge the adjacent pair whose concatenation
// has the lowest id, leftmost first), a second encode (from the cache) that differs, or bpe_encode_parallel
// cutting the text into chunks and giving other ids than one sequential encode.
#include <climits>
#include <memory>
#include <unordered_map>

#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

// The reference, one piece at a time (pieces over kMaxReferencePiece bytes are not checked: it is O(n^2)).
constexpr size_t kMaxReferencePiece = 300;

static bool reference_piece(const std::unordered_map<std::string, int>& rank, std::string_view piece,
                            std::vector<int>& out) {
    if (piece.size() > kMaxReferencePiece) return false;
    auto whole = rank.find(std::string(piece));
    if (whole != rank.end()) {
        out.push_back(whole->second);
        return true;
    }
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    while (parts.size() > 1) {
        int best = INT_MAX;
        size_t at = 0;
        for (size_t k = 0; k + 1 < parts.size(); k++) {
            auto it = rank.find(parts[k] + parts[k + 1]);
            if (it != rank.end() && it->second < best) {
                best = it->second;
                at = k;
            }
        }
        if (best == INT_MAX) break;
        parts[at] += parts[at + 1];
        parts.erase(parts.begin() + (std::ptrdiff_t)at + 1);
    }
    for (const std::string& p : parts) out.push_back(rank.at(p));
    return true;
}

// The reference ids of `text` (false if a piece was too long to check).
static bool reference_encode(const fuzz::SyntheticVocab& v, const std::unordered_map<std::string, int>& rank,
                             std::string_view text, bool allow_special, std::vector<int>& out) {
    const std::string_view eot(BPETokenizer::kEndOfText);
    bool checked = true;
    while (true) {
        const size_t hit = allow_special ? text.find(eot) : std::string_view::npos;
        gpt2_pretokenize(text.substr(0, hit), [&](size_t off, size_t len) {
            checked = checked && reference_piece(rank, text.substr(off, len), out);
        });
        if (hit == std::string_view::npos) return checked;
        out.push_back(v.eot);
        text = text.substr(hit + eot.size());
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::EncodeInput in = fuzz::unpack_encode_input(data, size);
    // Loaded again only when the vocabulary changes (a BPETokenizer is immutable; the encoder is made anew).
    static std::string loaded_json, loaded_bpe;
    static std::unique_ptr<BPETokenizer> loaded;
    if (!loaded || loaded_json != in.vocab.encoder_json || loaded_bpe != in.vocab.vocab_bpe) {
        loaded.reset();
        const std::string json = fuzz::write_scratch_file("encoder.json", in.vocab.encoder_json);
        const std::string bpe = fuzz::write_scratch_file("vocab.bpe", in.vocab.vocab_bpe);
        try {
            loaded = std::make_unique<BPETokenizer>(json, bpe);
        } catch (const FileError& e) {
            // merge i makes the i-th id from 256 on, <|endoftext|> skipped wherever it is: every synthetic
            // vocabulary is valid by construction and must load
            FUZZ_REQUIRE(false, "a valid vocabulary does not load: %s", e.what());
            return 0;
        }
        loaded_json = in.vocab.encoder_json;
        loaded_bpe = in.vocab.vocab_bpe;
    }
    const BPETokenizer& tok = *loaded;
    FUZZ_REQUIRE(tok.vocab_size() == (int)in.vocab.tokens.size() && tok.eot_token() == in.vocab.eot &&
                     tok.tokens() == in.vocab.tokens,
                 "the loaded vocabulary differs from the one written");

    BPEEncoder enc(tok);
    std::vector<int> ids;
    enc.encode(in.text, ids, in.allow_special);
    for (int id : ids) FUZZ_REQUIRE(id >= 0 && id < tok.vocab_size(), "id %d outside the vocabulary", id);
    FUZZ_REQUIRE(tok.decode(ids.data(), ids.size()) == in.text, "decode(encode(text)) != text");

    std::unordered_map<std::string, int> rank;
    for (size_t id = 0; id < in.vocab.tokens.size(); id++) {
        if ((int)id != in.vocab.eot) rank.emplace(in.vocab.tokens[id], (int)id);
    }
    std::vector<int> expect;
    if (reference_encode(in.vocab, rank, in.text, in.allow_special, expect)) {
        FUZZ_REQUIRE(ids == expect, "ids differ from the reference BPE (%zu ids, reference %zu)", ids.size(),
                     expect.size());
    }

    std::vector<int> cached;
    enc.encode(in.text, cached, in.allow_special);
    FUZZ_REQUIRE(cached == ids, "a second encode with the same encoder gives other ids");
    if (in.text.size() > in.chunk_bytes) {  // else one chunk: nothing to check
        const std::vector<int> parallel = bpe_encode_parallel(tok, in.text, 1, in.allow_special, in.chunk_bytes);
        FUZZ_REQUIRE(parallel == ids, "bpe_encode_parallel with %zu-byte chunks differs from one sequential encode",
                     in.chunk_bytes);
    }
    return 0;
}
