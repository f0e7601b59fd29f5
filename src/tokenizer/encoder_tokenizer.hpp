// The tokenizer of an encoder checkpoint (the qa and mlm tasks): text -> ids with code-point offsets,
// the special tokens around one text or a pair, their token type ids, and decoding.
//
// Model: a tokenizer.json first (as a fast tokenizer loads), run by HfTokenizer whatever its stages;
// else a slow class transformers converts (tokenizer_config.json tokenizer_class with a row in
// slow_converters.cpp: BertTokenizer, DistilBertTokenizer), read through that conversion and run by
// HfTokenizer; XLMRobertaTokenizer (sentencepiece.bpe.model) as the slow class runs it: added tokens
// split out first (<mask> lstrip), each other part through sentencepiece, piece ids + 1 (fairseq:
// <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> last), offsets as sentencepiece reports them; everything
// else as ByteLevelBPE::from_dir reads RoBERTa's vocab.json + merges.txt. The frame (what the
// post-processor puts around the texts) is RoBERTa's `<s> A </s>` / `<s> A </s></s> B </s>` without
// type ids for ByteLevelBPE and XLM-R, and whatever the file's post-processor adds otherwise (BERT:
// `[CLS] A [SEP] B [SEP]`, types 0 .. 0 1 .. 1; a frame typing everything 0 gives no type ids).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace evalrun {

class HfTokenizer;
struct XlmrSentencePiece;

// The special tokens around the texts, as tokenizer(text) / tokenizer(a, b) put them.
struct EncoderFrame {
  std::vector<std::int64_t> before, between, after;  // single: before A after; pair: before A between B after
  std::vector<std::int64_t> before_types, between_types, after_types;  // empty: no type ids
  std::int64_t a_type = 0, b_type = 0;
  bool has_types() const { return !before_types.empty(); }
};

class EncoderTokenizer {
 public:
  static EncoderTokenizer from_dir(const std::string& dir);
  // RoBERTa's byte-level BPE (tests and callers that already hold one).
  EncoderTokenizer(ByteLevelBPE bpe);  // NOLINT(google-explicit-constructor): a ByteLevelBPE is one

  // Text -> ids without special tokens; special-token strings in the text are single tokens.
  Encoding encode(std::string_view text) const;
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  const EncoderFrame& single() const { return single_; }
  const EncoderFrame& pair() const { return pair_; }
  // pad, unk and mask (-1 when absent); bos / eos for RoBERTa and XLM-R.
  const SpecialTokens& special() const { return special_; }
  const std::string& vocab_file() const { return vocab_file_; }
  const std::string& sha256() const { return sha256_; }
  std::int64_t vocab_size() const;

 private:
  EncoderTokenizer() = default;
  static EncoderTokenizer xlm_roberta(const std::string& dir);
  // A tokenizer.json (or a slow class's conversion) read from `files`: special tokens from the
  // directory's tokenizer_config.json / special_tokens_map.json, frames from the post-processor.
  static EncoderTokenizer from_hf(HfTokenizer tok, const std::string& dir, std::vector<std::filesystem::path> files);
  std::shared_ptr<const ByteLevelBPE> bpe_;
  std::shared_ptr<const HfTokenizer> hf_;
  std::shared_ptr<const XlmrSentencePiece> xlmr_;
  EncoderFrame single_, pair_;
  SpecialTokens special_;
  std::string vocab_file_, sha256_;
};

}  // namespace evalrun
