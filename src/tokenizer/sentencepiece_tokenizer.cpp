#include "tokenizer/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include "common/errors.hpp"

namespace evalrun {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
};

SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& model_path) {
  auto impl = std::make_shared<Impl>();
  impl->path = model_path;
  const auto status = impl->sp.Load(model_path);
  if (!status.ok()) throw InputError(model_path, "cannot load sentencepiece model: " + status.ToString());
  SentencePieceTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

std::vector<std::int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw InputError(impl_->path, "sentencepiece encode failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  std::string out;
  const auto status = impl_->sp.Decode(v, &out);
  if (!status.ok()) throw InputError(impl_->path, "sentencepiece decode failed: " + status.ToString());
  return out;
}

std::int64_t SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
std::int64_t SentencePieceTokenizer::bos_id() const { return impl_->sp.bos_id(); }
std::int64_t SentencePieceTokenizer::eos_id() const { return impl_->sp.eos_id(); }
std::int64_t SentencePieceTokenizer::pad_id() const { return impl_->sp.pad_id(); }
std::int64_t SentencePieceTokenizer::unk_id() const { return impl_->sp.unk_id(); }

}  // namespace evalrun
