#!/usr/bin/env python3
"""Checks ./tokenizer and ./data/prepro against Python tiktoken, then benchmarks encoding speed.

Run by scripts/bench/bench_tokenizer.sh on a machine with tiktoken installed (no network needed: the
"gpt2" encoding is built from the local encoder.json/vocab.bpe with tiktoken's own loader).
  1. every hand-written case of tests/unit/test_bpe_tokenizer.cpp: tiktoken's ids == the ids in the test;
  2. whole files: token count + sha256 of little-endian uint32 ids, tiktoken vs ours;
  3. invalid UTF-8 tails: tiktoken's CoreBPE._encode_bytes vs ours;
  4. fuzz: N random strings -> JSONL -> data/prepro shard vs [eot] + tiktoken ids per document;
  5. speed: the documents of the corpus files (split after each blank line), repeated R times:
     tiktoken encode_ordinary one document at a time (1 thread) and encode_ordinary_batch
     (all cores), ours via `tokenizer bench` (1 thread and all cores). MB/s = input bytes / seconds.
"""
import argparse, base64, hashlib, json, os, random, re, struct, subprocess, sys, tempfile, time

import tiktoken
import tiktoken.load

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def load_tiktoken(vocab_dir):
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(vocab_dir, "vocab.bpe"), encoder_json_file=os.path.join(vocab_dir, "encoder.json"))
    pat = GPT2_PAT
    try:  # use the pattern string of the installed tiktoken's own gpt2 definition when it has one
        from tiktoken_ext import openai_public
        pat = getattr(openai_public, "r50k_pat_str", pat)
    except Exception:
        pass
    return tiktoken.Encoding(name="gpt2_local", pat_str=pat, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}), pat


def sha_le32(ids):
    return hashlib.sha256(struct.pack("<%dI" % len(ids), *ids)).hexdigest()


def ours_encode(data, vocab_dir):
    out = subprocess.run(["./tokenizer", "encode", "--vocab-dir", vocab_dir, "--raw"], input=data,
                         capture_output=True, check=True).stdout
    return list(struct.unpack("<%dH" % (len(out) // 2), out))


def test_cases(path):
    """(name, bytes, ids) from the C++ table: {"name", std::string("...", N), {ids}}."""
    src = open(path, encoding="utf-8").read()
    cases = []
    for m in re.finditer(r'\{"(\w+)", std::string\("((?:[^"\\]|\\x[0-9a-f]{2}|" ")*)", (\d+)\),\s*\{([\d, ]*)\}\}', src):
        lit = m.group(2).replace('" "', "")
        data = re.sub(rb"\\x([0-9a-f]{2})", lambda h: bytes([int(h.group(1), 16)]), lit.encode("latin-1"))
        assert len(data) == int(m.group(3)), m.group(1)
        cases.append((m.group(1), data, [int(x) for x in m.group(4).split(",") if x.strip()]))
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("DATA_MIRROR", "../shared/data"))
    ap.add_argument("--repeat-corpus", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--fuzz", type=int, default=3000)
    ap.add_argument("--max-docs", type=int, default=0, help="benchmark only the first N documents (quick runs)")
    args = ap.parse_args()
    vocab = os.path.join(args.data, "gpt2")
    enc, pat = load_tiktoken(vocab)
    print(f"tiktoken {tiktoken.__version__}, pattern {pat!r}")
    failures = 0

    cases = test_cases("tests/unit/test_bpe_tokenizer.cpp")
    bad = [name for name, data, ids in cases if enc.encode_ordinary(data.decode("utf-8")) != ids]
    print(f"[1] test cases: {len(cases)} checked against tiktoken, {len(bad)} differ {bad}")
    failures += len(bad) + (len(cases) < 25)
    special = enc.encode("text <|endoftext|> more<|endoftext|>", allowed_special="all")
    print(f"    allowed_special='all': {special} (test expects [5239, 220, 50256, 517, 50256])")
    failures += special != [5239, 220, 50256, 517, 50256]

    for rel in ["tinyshakespeare/input.txt", "alice/pg11.txt", "alice/pg11_lf.txt"]:
        data = open(os.path.join(args.data, rel), "rb").read()
        theirs = enc.encode_ordinary(data.decode("utf-8"))
        ours = ours_encode(data, vocab)
        ok = theirs == ours
        failures += not ok
        print(f"[2] {rel}: tiktoken {len(theirs)} tokens sha256_le32 {sha_le32(theirs)}; ours {len(ours)} {sha_le32(ours)} {'SAME' if ok else 'DIFFERENT'}")

    for data in [b"\xff", b"hello \xff\xfe", b"wow!\xff", b"caf\xc3", b"abc\xff" b"def", b"\x80abc"]:
        theirs = enc._core_bpe._encode_bytes(data)
        ours = ours_encode(data, vocab)
        print(f"[3] {data!r}: tiktoken _encode_bytes {theirs}, ours {ours}{'' if theirs == ours else '  (differs: see docs/TOKENIZER.md)'}")

    rng = random.Random(7)
    alphabet = list("aZ09 '\t\n\r.,!?-sStTreREvellmdD") + [" ", "  ", "'s", "'re", "'ll", "'S", "\u00a0", "\u2009",
        "\u3000", "\u0085", "\u2028", "é", "ß", "Ω", "ж", "中", "文", "日本", "٣", "६", "²", "½", "Ⅻ", "😀", "👍🏽",
        "👨\u200d👩\u200d👧", "\u200d", "🇫🇷", "\ufeff", "<|endoftext|>", "\u0301", "ǅ", "ʰ", "〇", "\x0b", "\x0c",
        "\x1c", "$", "…", "—", "’", "\x00", "\U0001F9D1\u200d\U0001F4BB"]
    docs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(args.fuzz)]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "fuzz.jsonl"), "w") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        subprocess.run(["./data/prepro", "--vocab-dir", vocab, "-o", os.path.join(tmp, "fuzz"), os.path.join(tmp, "fuzz.jsonl")],
                       check=True, capture_output=True)
        shard = open(os.path.join(tmp, "fuzz_train_000000.bin"), "rb").read()[1024:]
    ours = list(struct.unpack("<%dH" % (len(shard) // 2), shard))
    theirs = []
    for d in docs:
        theirs += [50256] + enc.encode_ordinary(d)
    ok = ours == theirs
    failures += not ok
    print(f"[4] fuzz: {len(docs)} random documents via JSONL + data/prepro: {len(theirs)} tokens, {'SAME' if ok else 'DIFFERENT'} as tiktoken")

    files = [os.path.join(args.data, p) for p in ["tinyshakespeare/input.txt", "alice/pg11.txt", "alice/pg11_lf.txt"]]
    corpus = b"".join(open(f, "rb").read() for f in files) * args.repeat_corpus
    text = corpus.decode("utf-8")
    parts = text.split("\n\n")  # documents end after each "\n\n", as `tokenizer bench` cuts them
    docs = [p + "\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    if args.max_docs:
        docs = docs[:args.max_docs]
        corpus = "".join(docs).encode()
        with open("/tmp/bench_tokenizer_corpus.txt", "wb") as f:
            f.write(corpus)
        files, args.repeat_corpus = ["/tmp/bench_tokenizer_corpus.txt"], 1
    nbytes = len(corpus)
    print(f"[5] corpus: {len(files)} files x {args.repeat_corpus} = {nbytes} bytes, {len(docs)} documents, {args.threads} threads")

    def best_of(fn, reps):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2], out

    t1, ids1 = best_of(lambda: [enc.encode_ordinary(d) for d in docs], 3)
    tn, idsn = best_of(lambda: enc.encode_ordinary_batch(docs, num_threads=args.threads), 3)
    flat = [t for d in ids1 for t in d]
    assert [t for d in idsn for t in d] == flat
    print(f"tiktoken threads=1 MB/s={nbytes / t1 / 1e6:.2f} (median of 3, {t1:.3f} s) tokens={len(flat)} sha256_le32={sha_le32(flat)}")
    print(f"tiktoken threads={args.threads} MB/s={nbytes / tn / 1e6:.2f} (median of 3, {tn:.3f} s; encode_ordinary_batch over the documents)")
    # tiktoken's best case on all cores: the same text as one large chunk per thread.
    per = (len(docs) + args.threads - 1) // args.threads
    chunks = ["".join(docs[i:i + per]) for i in range(0, len(docs), per)]
    tc, _ = best_of(lambda: enc.encode_ordinary_batch(chunks, num_threads=args.threads), 3)
    print(f"tiktoken threads={args.threads} MB/s={nbytes / tc / 1e6:.2f} (median of 3, {tc:.3f} s; {len(chunks)} large chunks, its best case)")
    out = subprocess.run(["./tokenizer", "bench", "--vocab-dir", vocab, "-j", str(args.threads), "--repeat", "3"]
                         + files * args.repeat_corpus, capture_output=True, text=True, check=True).stdout
    print(out.strip())
    mbs = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"ours threads=(\d+) .*MB/s=([\d.]+)", out)}
    same = f"sha256_le32={sha_le32(flat)}" in out
    failures += not same
    o1, on = mbs.get(1, 0), mbs.get(args.threads, 0)
    print(f"ids: ours == tiktoken on the corpus: {same}")
    print(f"ratio single-thread ours/tiktoken = {o1 / (nbytes / t1 / 1e6):.2f}x (target >= 1.0)")
    print(f"ratio all-cores ours/tiktoken = {on / (nbytes / tn / 1e6):.2f}x")
    print(f"scaling ours {args.threads} threads / 1 thread = {on / o1:.2f}x (target >= 8)")
    print(f"check failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
