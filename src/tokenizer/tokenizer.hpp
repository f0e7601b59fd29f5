// Tokenizers. ByteLevelBPE is the GPT-2 / RoBERTa byte-level BPE (vocab.json + merges.txt, or a
// tokenizer.json of type BPE with a ByteLevel pre-tokenizer), with character offsets as Hugging Face's
// fast tokenizers report them (trim_offsets, code-point indices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace evalrun {

struct Encoding {
  std::vector<std::int64_t> ids;
  // [start, end) in Unicode code points of the input text, one per id; special tokens found in the
  // text get their own span; a token of only spaces gets an empty span [e, e).
  std::vector<std::pair<int, int>> offsets;
};

struct SpecialTokens {
  std::int64_t bos = -1;   // <s>  (RoBERTa: also cls)
  std::int64_t eos = -1;   // </s> (RoBERTa: also sep)
  std::int64_t pad = -1;
  std::int64_t unk = -1;
  std::int64_t mask = -1;  // <mask>
};

class ByteLevelBPE {
 public:
  // Reads a tokenizer directory: tokenizer.json if present, else vocab.json + merges.txt; special
  // tokens from special_tokens_map.json / tokenizer_config.json when present, else the RoBERTa
  // defaults (<s>, </s>, <pad>, <unk>, <mask>). Errors name the file (and line for merges.txt).
  static ByteLevelBPE from_dir(const std::string& dir);
  static ByteLevelBPE from_files(const std::string& vocab_json, const std::string& merges_txt);

  // Text -> ids without adding <s>/</s>. Special tokens written in the text (e.g. "<mask>") are
  // recognised as single tokens; <mask> strips the space before it (lstrip), as in RoBERTa.
  Encoding encode(std::string_view text) const;
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  std::int64_t token_to_id(const std::string& token) const;  // -1 if absent
  const std::string& id_to_token(std::int64_t id) const;
  std::int64_t vocab_size() const;
  const SpecialTokens& special() const { return special_; }
  // sha256 over the files it was read from (result-file provenance)
  const std::string& sha256() const { return sha256_; }
  // The file the vocabulary came from (tokenizer.json or vocab.json), for messages about its tokens.
  const std::string& vocab_file() const { return vocab_file_; }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  SpecialTokens special_;
  std::string sha256_;
  std::string vocab_file_;
};

}  // namespace evalrun
