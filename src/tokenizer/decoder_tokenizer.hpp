// The tokenizer of a decoder (Llama-family) checkpoint directory, with the special ids that
// generation needs: BOS for prompts, the stop ids, the pad id.
//
// Model, first present wins: `tokenizer.json` (the whole pipeline it describes, see HfTokenizer and
// docs/tokenizers.md; first, as transformers' AutoTokenizer loads the fast tokenizer), a slow class
// transformers converts (tokenizer_config.json tokenizer_class with a row in slow_converters.cpp, e.g.
// Qwen2Tokenizer), `tokenizer.model` (sentencepiece, as LlamaTokenizer or GemmaTokenizer), `vocab.json` +
// `merges.txt` (byte-level BPE, see ByteLevelBPE). Another tokenizer_class on the slow files is an
// InputError.
//
// Special tokens, first source that names them wins:
//   1. tokenizer_config.json: bos_token / eos_token / pad_token / unk_token (a string or an
//      AddedToken object {"content": ...}; null = none), add_bos_token, add_eos_token, legacy;
//      added_tokens_decoder {"<id>": {"content", "special"}} maps contents to ids.
//   2. special_tokens_map.json: the same token keys.
//   3. the sentencepiece model's own bos/eos/unk/pad ids.
//   4. generation_config.json: bos_token_id, eos_token_id, pad_token_id.
//   5. config.json: the same keys (last resort).
// Stop ids: generation_config.json "eos_token_id" (an int or a LIST: every entry is a stop id, as
// transformers' generate treats it); else the tokenizer's eos; else config.json "eos_token_id" (int or
// list). Pad id: the tokenizer's pad token if it has one, else generation_config / config.json
// "pad_token_id", else the first stop id (what transformers' generate falls back to), never an
// assumed 0; -1 only when there is neither a pad nor an eos.
// Errors (unreadable JSON, a token string the vocabulary lacks, an id outside the vocabulary) are
// InputErrors naming the file and key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

class DecoderTokenizer {
 public:
  static DecoderTokenizer from_dir(const std::string& dir);

  // Prompt text -> ids: BOS first when add_bos_token (default true when the config does not say) is
  // true AND the checkpoint has a BOS that differs from its EOS (the seed's rule: Granite-style
  // checkpoints whose bos == eos get none). With a tokenizer.json, BOS exactly when its
  // post-processor puts the BOS first (as the fast tokenizer does, whatever add_bos_token says). No EOS is appended even when add_eos_token is set: a
  // prompt is meant to be continued. Special-token strings written in the text (e.g. "</s>") become
  // their ids, as transformers' slow tokenizers split them out before sentencepiece.
  std::vector<std::int64_t> encode(std::string_view text) const;
  // The same without BOS.
  std::vector<std::int64_t> encode_without_bos(std::string_view text) const;

  // ids -> text. skip_special_tokens drops bos/eos/pad/unk, every stop id and every added token
  // marked special. Otherwise special tokens are written as their text (LlamaTokenizer: with a space
  // before a special token that follows ordinary text when legacy is true; GemmaTokenizer: never).
  // Invalid UTF-8 from byte
  // tokens becomes U+FFFD, as transformers' decode does.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = true) const;

  std::int64_t bos_id() const { return bos_; }  // -1: none
  std::int64_t eos_id() const { return eos_; }  // the tokenizer's eos (else the first stop id); -1: none
  std::int64_t pad_id() const { return pad_; }
  std::int64_t unk_id() const { return unk_; }
  const std::vector<std::int64_t>& stop_ids() const { return stop_ids_; }
  bool adds_bos() const { return adds_bos_; }     // encode() puts BOS first (the rule above)
  bool add_eos_token() const { return add_eos_; } // as configured; informational, see encode()
  bool is_special(std::int64_t id) const;
  std::int64_t vocab_size() const;
  const std::string& kind() const { return kind_; }  // "tokenizer.json", "sentencepiece" or "byte-level-bpe"
  const std::string& sha256() const { return sha256_; }  // over the tokenizer files read (provenance)

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
  std::int64_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  std::vector<std::int64_t> stop_ids_;
  bool adds_bos_ = false, add_eos_ = false;
  std::string kind_, sha256_;
};

}  // namespace evalrun
