// sentencepiece models (tokenizer.model), as Llama-family checkpoints ship them. Linked against the
// sentencepiece that scripts/build_sentencepiece.sh builds on the system protobuf: Debian's own
// library embeds an older protobuf that crashes any process that also loads libtorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

class SentencePieceTokenizer {
 public:
  // InputError naming the file when it is missing or not a sentencepiece model.
  static SentencePieceTokenizer from_file(const std::string& model_path);

  // Text -> piece ids, without BOS/EOS (the caller adds them as the checkpoint asks).
  std::vector<std::int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::int64_t vocab_size() const;
  std::int64_t bos_id() const;  // -1 when the model has none
  std::int64_t eos_id() const;
  std::int64_t pad_id() const;
  std::int64_t unk_id() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace evalrun
