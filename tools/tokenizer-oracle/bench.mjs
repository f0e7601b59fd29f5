// transformers.js' encoding throughput, for bench/tokenizer_throughput.cpp (which runs it in the same
// run as evalrun's and prints the ratio): encode(line, add_special_tokens=false) over every line.
// Usage: node bench.mjs VOCAB TEXT_FILE [max_bytes]   ->   one line "mb_per_s <float> bytes <n>"
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);
const [vocab, file, maxArg] = process.argv.slice(2);
const dir = require.resolve(`@lenml/tokenizer-${vocab}/models/tokenizer.json`).replace(/tokenizer\.json$/, "");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(dir + "tokenizer.json", "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(dir + "tokenizer_config.json", "utf8")),
});
const max = maxArg ? Number(maxArg) : Infinity;
const lines = [];
let bytes = 0;
for (const line of readFileSync(file, "utf8").split("\n")) {
  const n = Buffer.byteLength(line, "utf8");
  if (bytes + n > max) break;
  lines.push(line);
  bytes += n;
}
const start = process.hrtime.bigint();
let tokens = 0;
for (const line of lines) tokens += tokenizer.encode(line, { add_special_tokens: false }).length;
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(`mb_per_s ${bytes / 1e6 / seconds} bytes ${bytes} tokens ${tokens}`);
