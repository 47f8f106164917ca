#!/usr/bin/env python3
"""The eval file llm.c's dev/data/hellaswag.py writes for a HellaSwag JSONL file, made apart from data/hellaswag:
its render_example (ctx_tokens = encode(ctx), each ending encode(" " + ending), the label) and data_common.py's
write_evalfile (the header and each example's uint16 stream) written again here with the standard library, so the
golden file tests/fixtures/hellaswag_fixture.bin checks the C++ converter's layout and rendering from outside.

Token ids come from tiktoken's "gpt2" encoding when tiktoken is installed (built from the local encoder.json and
vocab.bpe with tiktoken's own loader, as scripts/bench/bench_tokenizer.py does: no network), else from our ./tokenizer
(--tokenizer ours, or when tiktoken is missing), which then checks only the layout, not the BPE; or from a JSON
file of rendered examples (--ids-json, written by scripts/reference/hellaswag_ids_tiktoken.js with npm's tiktoken). The
committed golden was made that way (npm tiktoken 1.0.22) and equals what --tokenizer ours gives.

  python3 scripts/reference/hellaswag_golden.py tests/fixtures/hellaswag_fixture.jsonl tests/fixtures/hellaswag_fixture.bin \\
      [--vocab-dir DIR] [--tokenizer auto|tiktoken|ours] [--ids-json FILE]
"""
import argparse
import json
import struct
import subprocess
import sys


def tiktoken_encoder(vocab_dir):
    import tiktoken
    import tiktoken.load
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(f"{vocab_dir}/vocab.bpe", f"{vocab_dir}/encoder.json")
    try:
        from tiktoken_ext import openai_public
        pat = openai_public.gpt2()["pat_str"]
    except Exception:
        pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding(name="gpt2_local", pat_str=pat, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    return enc.encode  # hellaswag.py's enc.encode: refuses <|endoftext|> in the text, as tiktoken does


def our_encoder(vocab_dir, tokenizer):
    def encode(text):
        if "<|endoftext|>" in text:
            raise ValueError("text contains <|endoftext|>")
        out = subprocess.run([tokenizer, "encode", "--vocab-dir", vocab_dir], input=text.encode("utf-8"),
                             capture_output=True, check=True)
        return [int(x) for x in out.stdout.split()]
    return encode


def render_example(example, encode):  # llm.c's render_example, the part that makes the data
    ctx_tokens = encode(example["ctx"])
    ending_tokens = [encode(" " + end) for end in example["endings"]]
    return {"label": example["label"], "ctx_tokens": ctx_tokens, "ending_tokens": ending_tokens}


def write_evalfile(filename, datas):  # llm.c's write_evalfile, without numpy
    assert len(datas) < 2**16, "too many examples?"
    full_stream, longest_example_bytes = [], 0
    for idx, data in enumerate(datas):
        stream = [2**16 - 1, 0, idx, data["label"]]
        assert len(data["ending_tokens"]) == 4, "expected 4 completions"
        stream.append(len(data["ending_tokens"]))
        assert all(0 <= t < 2**16 - 1 for t in data["ctx_tokens"]), "bad context token"
        stream.append(len(data["ctx_tokens"]))
        stream.extend(data["ctx_tokens"])
        for end_tokens in data["ending_tokens"]:
            assert all(0 <= t < 2**16 - 1 for t in end_tokens), "bad completion token"
            stream.append(len(end_tokens))
            stream.extend(end_tokens)
        nbytes = len(stream) * 2
        assert nbytes < 2**16, "example too large?"
        stream[1] = nbytes
        longest_example_bytes = max(longest_example_bytes, nbytes)
        full_stream.extend(stream)
    header = [20240522, 1, len(datas), longest_example_bytes] + [0] * 252
    with open(filename, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(full_stream)}H", *full_stream))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--vocab-dir", default="data/cache/gpt2")
    ap.add_argument("--tokenizer", choices=["auto", "tiktoken", "ours"], default="auto")
    ap.add_argument("--tokenizer-bin", default="./tokenizer")
    ap.add_argument("--ids-json", help="the rendered examples (label, ctx_tokens, ending_tokens) instead of a tokenizer")
    args = ap.parse_args()
    if args.ids_json:
        with open(args.ids_json) as f:
            datas = json.load(f)
        with open(args.input, encoding="utf-8") as f:
            labels = [json.loads(line)["label"] for line in f if line.strip()]
        assert [d["label"] for d in datas] == labels, "the ids file is not of this input"
        write_evalfile(args.output, datas)
        print(f"wrote {args.output}: {len(datas)} examples, token ids from {args.ids_json}")
        return
    encode, which = None, args.tokenizer
    if which in ("auto", "tiktoken"):
        try:
            encode, which = tiktoken_encoder(args.vocab_dir), "tiktoken"
        except ImportError:
            if args.tokenizer == "tiktoken":
                sys.exit("error: tiktoken is not installed")
    if encode is None:
        encode, which = our_encoder(args.vocab_dir, args.tokenizer_bin), "ours"
    with open(args.input, encoding="utf-8") as f:
        datas = [render_example(json.loads(line), encode) for line in f if line.strip()]
    write_evalfile(args.output, datas)
    print(f"wrote {args.output}: {len(datas)} examples, token ids from {which}")


if __name__ == "__main__":
    main()
