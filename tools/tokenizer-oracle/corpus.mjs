// Builds the oracle corpus, one JSON string per line: SQuAD v1.1 dev contexts and questions,
// WikiText-2 test lines (from DATA_DIR, the EVALRUN_DATA_DIR layout) and the hand-written edge cases.
// Usage: node corpus.mjs DATA_DIR EDGE_CASES.jsonl OUT.jsonl
import { readFileSync, writeFileSync } from "node:fs";

const [data, edge, out] = process.argv.slice(2);
const texts = [];
const squad = JSON.parse(readFileSync(`${data}/squad/dev-v1.1.json`, "utf8"));
for (const article of squad.data) {
  for (const p of article.paragraphs) {
    texts.push(p.context);
    for (const qa of p.qas) texts.push(qa.question);
  }
}
for (const line of readFileSync(`${data}/wikitext-2/wiki.test.txt`, "utf8").split("\n")) texts.push(line);
for (const line of readFileSync(edge, "utf8").split("\n")) {
  if (line.length > 0) texts.push(JSON.parse(line));
}
writeFileSync(out, texts.map((t) => JSON.stringify(t)).join("\n") + "\n");
console.error(`corpus: ${texts.length} texts -> ${out}`);
