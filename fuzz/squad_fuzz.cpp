// Fuzz target: SQuAD data sets (src/io/squad.hpp read_squad), both layouts: every input is read
// as a .json file (SQuAD v1.1 / v2.0 layout) and as a .jsonl file (one question per line).
// Accepted examples must have unique ids and answers that really sit in their context at
// answer_start (counted in code points).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "common/utf8.hpp"
#include "fuzz_util.hpp"
#include "io/squad.hpp"

using namespace evalrun;

namespace {

void check(const std::vector<SquadExample>& examples) {
  std::set<std::string> ids;
  for (const auto& ex : examples) {
    FUZZ_CHECK(ids.insert(ex.id).second);
    const auto starts = utf8_code_point_starts(ex.context);
    for (const auto& a : ex.answers) {
      FUZZ_CHECK(a.answer_start >= 0);
      FUZZ_CHECK(static_cast<std::size_t>(a.answer_start) < starts.size());
      const std::size_t byte = starts[static_cast<std::size_t>(a.answer_start)];
      FUZZ_CHECK(ex.context.compare(byte, a.text.size(), a.text) == 0);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const std::string json_path = scratch.write("squad.json", in);
  const std::string jsonl_path = scratch.write("squad.jsonl", in);
  fuzz::expect_clean([&] { check(read_squad(json_path)); });
  fuzz::expect_clean([&] { check(read_squad(jsonl_path)); });
  return 0;
}
