// Fuzz target: the TOML run config (src/config/config.hpp parse_run_spec).
//
// Input: TOML text, optionally followed by a line "@@ set" and one `--set` override per line.
// An accepted config must round-trip: its config_text (the canonical TOML the result file stores)
// parses back, without the overrides, to the same config_text and the same key values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "fuzz_util.hpp"

using namespace evalrun;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::string text = in;
  std::vector<std::string> overrides;
  static const std::string kMarker = "\n@@ set\n";
  if (const auto at = in.find(kMarker); at != std::string::npos) {
    text = in.substr(0, at + 1);
    std::size_t pos = at + kMarker.size();
    while (pos <= in.size()) {
      std::size_t nl = in.find('\n', pos);
      if (nl == std::string::npos) nl = in.size();
      if (nl > pos) overrides.push_back(in.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  fuzz::expect_clean([&] {
    const RunSpec a = parse_run_spec(text, "fuzz.toml", overrides);
    FUZZ_CHECK(!a.run.name.empty());
    FUZZ_CHECK(!a.output.path.empty());
    RunSpec b;
    const bool reparsed = fuzz::expect_clean([&] { b = parse_run_spec(a.config_text, "config_text"); });
    if (!reparsed) {
      std::fprintf(stderr, "config_text of an accepted config is refused:\n%s\n", a.config_text.c_str());
      std::abort();
    }
    FUZZ_CHECK(b.config_text == a.config_text);
    FUZZ_CHECK(b.run.name == a.run.name && b.run.threads == a.run.threads);
    FUZZ_CHECK(b.model.path == a.model.path && b.model.tokenizer == a.model.tokenizer);
    FUZZ_CHECK(b.model.dtype == a.model.dtype && b.task.kind == a.task.kind);
    FUZZ_CHECK(b.task.dataset == a.task.dataset && b.task.batch_size == a.task.batch_size);
    FUZZ_CHECK(b.task.max_seq_length == a.task.max_seq_length && b.task.doc_stride == a.task.doc_stride);
    FUZZ_CHECK(b.output.logits == a.output.logits && b.output.top_k == a.output.top_k);
    FUZZ_CHECK(b.quantization.method == a.quantization.method);
  });
  return 0;
}
