// The tokenizer oracle: transformers.js (@lenml/tokenizers, an implementation of tokenizer.json
// independent of evalrun) run on a corpus, one JSON line per text:
//   {"text": ..., "ids": encode(text, add_special_tokens=false), "ids_special": encode(text),
//    "decoded": decode(ids_special, skip_special_tokens=true)}
// Usage: node oracle.mjs VOCAB OUT.jsonl CORPUS.txt...
//   VOCAB: llama3 | qwen3 | gemma3 | llama2 (the @lenml/tokenizer-VOCAB package's real files)
//   CORPUS: *.jsonl files hold one JSON string per line; other files one text per line. The corpus
//   builder (corpus.mjs) writes the first kind, so texts keep their tabs and newlines.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);
const [vocab, out, ...corpora] = process.argv.slice(2);
if (!vocab || !out || corpora.length === 0) {
  console.error("usage: node oracle.mjs VOCAB OUT.jsonl CORPUS...");
  process.exit(2);
}
const dir = require.resolve(`@lenml/tokenizer-${vocab}/models/tokenizer.json`).replace(/tokenizer\.json$/, "");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(dir + "tokenizer.json", "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(dir + "tokenizer_config.json", "utf8")),
});
const lines = [];
for (const file of corpora) {
  const text = readFileSync(file, "utf8");
  for (const line of text.split("\n")) {
    if (file.endsWith(".jsonl")) {
      if (line.length > 0) lines.push(JSON.parse(line));
    } else {
      lines.push(line);
    }
  }
}
const rows = lines.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const ids_special = tokenizer.encode(text);
  // transformers.js refuses to decode an empty list; transformers answers "".
  const decoded = ids_special.length ? tokenizer.decode(ids_special, { skip_special_tokens: true }) : "";
  return JSON.stringify({ text, ids, ids_special, decoded });
});
writeFileSync(out, rows.join("\n") + "\n");
console.error(`oracle: ${vocab}: ${rows.length} lines -> ${out}`);
