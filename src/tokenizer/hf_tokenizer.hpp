// A Hugging Face `tokenizer.json` (the fast tokenizers' file) run as the format defines it:
// added tokens split out first, then normalizer -> pre-tokenizer -> model -> post-processor, and
// decoding through the file's decoder. Every stage the file names must be one evalrun implements
// (see docs/tokenizers.md); anything else is an InputError naming the file, the JSON path and the
// value, so a file evalrun would tokenize differently is refused instead of silently mis-encoded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace evalrun {

struct HfEncoding {
  std::vector<std::int64_t> ids;
  // [start, end) in code points of the input (Python str indices), one per id; tokens that the
  // post-processor adds (BOS, [CLS], ...) get [0, 0), as the fast tokenizers report them.
  std::vector<std::pair<int, int>> offsets;
  std::vector<std::int64_t> type_ids;  // 0 for the first sequence; the pair's as the post-processor says
  std::vector<bool> special;           // added by the post-processor
};

class HfTokenizer {
 public:
  // Reads `tokenizer_json`; a tokenizer_config.json in the same directory supplies what transformers
  // takes from it at decode time (clean_up_tokenization_spaces) and more special tokens.
  static HfTokenizer from_file(const std::string& tokenizer_json);
  // The same from text (tests); `name` stands for the file in messages.
  static HfTokenizer from_json_text(const std::string& tokenizer_json, const std::string& name,
                                    const std::string& tokenizer_config_json = "");

  // transformers' tokenizer(text, add_special_tokens=...) (default true, as transformers).
  HfEncoding encode(std::string_view text, bool add_special_tokens = true) const;
  HfEncoding encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true) const;
  // transformers' tokenizer.decode(ids, skip_special_tokens=...); ids the vocabulary lacks are skipped.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = true) const;

  std::int64_t token_to_id(const std::string& token) const;  // added tokens first; -1 when absent
  std::string id_to_token(std::int64_t id) const;            // "" when absent
  std::int64_t vocab_size() const;                           // one past the largest id (model or added)
  bool is_special(std::int64_t id) const;                    // an added token marked special
  const std::string& file() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace evalrun
