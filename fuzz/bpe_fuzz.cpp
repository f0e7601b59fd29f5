// Fuzz target: the byte-level BPE tokenizer (src/tokenizer/tokenizer.hpp ByteLevelBPE) and the
// decoder tokenizer built on it (decoder_tokenizer.hpp), loading AND encoding.
//
// Input, two forms:
//  * a "@@ NAME" container (fuzz_util.hpp): a tokenizer directory (vocab.json, merges.txt,
//    tokenizer.json, special_tokens_map.json, tokenizer_config.json, generation_config.json,
//    config.json) and an optional "@@ text" section, the text to encode (default: a sample with
//    special tokens). Loads it with ByteLevelBPE::from_dir and DecoderTokenizer::from_dir.
//  * anything else: arbitrary bytes encoded by a fixed tokenizer (the built-in tiny BPE,
//    tiny_bpe.hpp, 400 entries), where decode(encode(text)) must give the text back (invalid UTF-8
//    replaced by U+FFFD) whenever the text holds no special-token string.
// Every encoding must have one in-vocabulary id and one in-range code-point span per token.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/utf8.hpp"
#include "fuzz_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"
#include "tokenizer/pretokenize.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace evalrun;

namespace {

void check_encoding(const ByteLevelBPE& tok, std::string_view text, const Encoding& enc) {
  const auto ncp = static_cast<int>(bpe_detail::to_code_points(text).cp.size());
  FUZZ_CHECK(enc.ids.size() == enc.offsets.size());
  int prev_start = 0;
  for (std::size_t i = 0; i < enc.ids.size(); ++i) {
    FUZZ_CHECK(enc.ids[i] >= 0 && enc.ids[i] < tok.vocab_size());
    const auto [start, end] = enc.offsets[i];
    FUZZ_CHECK(0 <= start && start <= end && end <= ncp);
    FUZZ_CHECK(start >= prev_start);
    prev_start = start;
  }
  // Every id decodes (they are all in the vocabulary), with and without special tokens.
  (void)tok.decode(enc.ids, false);
  (void)tok.decode(enc.ids, true);
}

const ByteLevelBPE& fixed_tokenizer() {
  static const ByteLevelBPE tok = [] {
    const std::string dir = (fuzz::Scratch::get().fixed_dir() / "tiny-bpe").string();
    write_tiny_bpe_tokenizer(dir, 400);
    return ByteLevelBPE::from_dir(dir);
  }();
  return tok;
}

void encode_with_fixed(std::string_view text) {
  const ByteLevelBPE& tok = fixed_tokenizer();
  const Encoding enc = tok.encode(text);
  check_encoding(tok, text, enc);
  if (text.find('<') == std::string_view::npos) {
    // No special-token string: byte-level BPE is lossless on the bytes.
    FUZZ_CHECK(tok.decode(enc.ids, false) == utf8_replace_invalid(text));
  }
}

void load_directory(const fuzz::Sections& sections) {
  auto& scratch = fuzz::Scratch::get();
  std::string text = "Hello <mask> world</s><s> it's 12 caf\xc3\xa9s  \n";
  for (const auto& [name, body] : sections.files) {
    if (name == "text") {
      text = body;
    } else {
      scratch.write(name, body);
    }
  }
  const std::string dir = scratch.dir().string();
  fuzz::expect_clean([&] {
    const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir);
    FUZZ_CHECK(tok.vocab_size() > 0);
    for (std::int64_t id : {tok.special().bos, tok.special().eos, tok.special().pad, tok.special().unk,
                            tok.special().mask}) {
      FUZZ_CHECK(id >= -1 && id < tok.vocab_size());
    }
    check_encoding(tok, text, tok.encode(text));
  });
  fuzz::expect_clean([&] {
    const DecoderTokenizer tok = DecoderTokenizer::from_dir(dir);
    const auto ids = tok.encode(text);
    (void)tok.decode(ids, true);
    (void)tok.decode(ids, false);
    std::vector<std::int64_t> specials = tok.stop_ids();
    for (std::int64_t id : {tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.unk_id()}) specials.push_back(id);
    (void)tok.decode(specials, false);
    (void)tok.decode(specials, true);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  fuzz::Scratch::get().reset();
  const auto sections = fuzz::split_sections(in);
  if (sections.container) {
    load_directory(sections);
  } else {
    encode_with_fixed(in);  // a fixed, valid tokenizer refuses no text
  }
  return 0;
}
