// Fuzz target: prompt files (src/io/prompts.hpp read_prompts). Every input is read as a .jsonl
// prompt file and as a plain prompt file (.txt, one prompt: the whole file). Accepted prompts must
// be non-empty valid UTF-8 with unique, non-empty ids.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "common/utf8.hpp"
#include "fuzz_util.hpp"
#include "io/prompts.hpp"

using namespace evalrun;

namespace {

void check(const std::vector<Prompt>& prompts) {
  FUZZ_CHECK(!prompts.empty());
  std::set<std::string> ids;
  for (const auto& p : prompts) {
    FUZZ_CHECK(!p.id.empty());
    FUZZ_CHECK(ids.insert(p.id).second);
    FUZZ_CHECK(!p.text.empty());
    for (std::size_t i = 0; i < p.text.size();) {
      const Utf8Char c = decode_utf8_at(p.text, i);
      FUZZ_CHECK(c.valid);
      i += static_cast<std::size_t>(c.length);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const std::string jsonl = scratch.write("prompts.jsonl", in);
  const std::string txt = scratch.write("prompt.txt", in);
  fuzz::expect_clean([&] { check(read_prompts(jsonl)); });
  fuzz::expect_clean([&] {
    const auto prompts = read_prompts(txt);
    check(prompts);
    FUZZ_CHECK(prompts.size() == 1 && prompts[0].id == "prompt" && prompts[0].text == in);
  });
  // The directory form: every *.txt file in it, here the one just written.
  fuzz::expect_clean([&] { check(read_prompts(scratch.dir().string())); });
  return 0;
}
