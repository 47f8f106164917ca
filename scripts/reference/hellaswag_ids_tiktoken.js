// The token ids llm.c's dev/data/hellaswag.py renders for a HellaSwag JSONL file (encode(ctx), encode(" " + ending)),
// by npm's tiktoken (the WASM build of tiktoken's own Rust core, with its bundled "gpt2" ranks), as JSON for
// scripts/reference/hellaswag_golden.py --ids-json: where Python's tiktoken is not installed, this keeps the golden file's ids
// independent of our tokenizer.
//   npm install tiktoken && node scripts/reference/hellaswag_ids_tiktoken.js tests/fixtures/hellaswag_fixture.jsonl > ids.json
const { get_encoding } = require("tiktoken");
const fs = require("fs");
const enc = get_encoding("gpt2");
const out = [];
for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n")) {
  if (!line.trim()) continue;
  const ex = JSON.parse(line);
  // encode() with tiktoken's default disallowed_special refuses <|endoftext|> in the text, as hellaswag.py's does
  out.push({ label: ex.label, ctx_tokens: Array.from(enc.encode(ex.ctx)),
             ending_tokens: ex.endings.map((e) => Array.from(enc.encode(" " + e))) });
}
enc.free();
console.log(JSON.stringify(out));
