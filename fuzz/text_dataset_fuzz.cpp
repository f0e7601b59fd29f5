// Fuzz target: MLM / text data sets (src/io/text_dataset.hpp read_text_samples). Every input is
// read as a .jsonl file ({"id", "text", "targets"} per line) and as a plain text file (one sample
// per non-blank line). Accepted samples must have unique non-empty ids; plain-text samples must be
// lines of the input.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "fuzz_util.hpp"
#include "io/text_dataset.hpp"

using namespace evalrun;

namespace {

void check(const std::vector<TextSample>& samples) {
  FUZZ_CHECK(!samples.empty());
  std::set<std::string> ids;
  for (const auto& s : samples) {
    FUZZ_CHECK(!s.id.empty());
    FUZZ_CHECK(ids.insert(s.id).second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const std::string jsonl = scratch.write("data.jsonl", in);
  const std::string txt = scratch.write("data.txt", in);
  fuzz::expect_clean([&] { check(read_text_samples(jsonl)); });
  fuzz::expect_clean([&] {
    const auto samples = read_text_samples(txt);
    check(samples);
    for (const auto& s : samples) {
      FUZZ_CHECK(s.targets.empty());
      FUZZ_CHECK(s.text.find('\n') == std::string::npos);
      FUZZ_CHECK(in.find(s.text) != std::string_view::npos);
    }
  });
  return 0;
}
