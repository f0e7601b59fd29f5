#include "tokenizer/encoder_tokenizer.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/slow_converters.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_config(const fs::path& p) {
  if (!fs::exists(p)) return json::object();
  const std::string text = read_file(p.string());
  try {
    check_json_nesting(text, p.string());
    json j = json::parse(text);
    if (!j.is_object()) throw InputError(p.string(), "expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw InputError(p.string(), "malformed JSON: " + clip_text(e.what()));
  }
}

// The id of a tokenizer_config.json special token (a string or {"content": ...}); -1 when not set.
std::int64_t special_id(const HfTokenizer& tok, const json& config, const std::string& file, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return -1;
  const json& v = config[key];
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
  else throw InputError(file + ": " + key, "expected a string or an object with a string \"content\"");
  const std::int64_t id = tok.token_to_id(content);
  if (id < 0) throw InputError(file + ": " + key, json(content).dump() + " is not in the vocabulary");
  return id;
}

// What the post-processor puts around "a" (and "b"): the specials before the first text, between the
// two and after the last, with their type ids.
EncoderFrame frame_of(const HfTokenizer& tok, bool pair, const std::string& where) {
  const HfEncoding e = pair ? tok.encode_pair("a", "b") : tok.encode("a");
  const std::size_t na = tok.encode("a", false).ids.size(), nb = pair ? tok.encode("b", false).ids.size() : 0;
  EncoderFrame f;
  std::size_t i = 0;
  auto specials = [&](std::vector<std::int64_t>& ids, std::vector<std::int64_t>& types) {
    for (; i < e.ids.size() && e.special[i]; ++i) {
      ids.push_back(e.ids[i]);
      types.push_back(e.type_ids[i]);
    }
  };
  auto text = [&](std::size_t n, std::int64_t& type) {
    if (n == 0 || i + n > e.ids.size()) throw InputError(where, "the post-processor's frame cannot be read");
    type = e.type_ids[i];
    for (std::size_t k = 0; k < n; ++k, ++i) {
      if (e.special[i] || e.type_ids[i] != type) throw InputError(where, "the post-processor's frame cannot be read");
    }
  };
  specials(f.before, f.before_types);
  text(na, f.a_type);
  if (pair) {
    specials(f.between, f.between_types);
    text(nb, f.b_type);
  }
  specials(f.after, f.after_types);
  if (i != e.ids.size()) throw InputError(where, "the post-processor's frame cannot be read");
  return f;
}

}  // namespace

EncoderTokenizer::EncoderTokenizer(ByteLevelBPE bpe)
    : bpe_(std::make_shared<const ByteLevelBPE>(std::move(bpe))),
      special_(bpe_->special()),
      vocab_file_(bpe_->vocab_file()),
      sha256_(bpe_->sha256()) {
  // RoBERTa: <s> A </s> and <s> A </s></s> B </s>; RobertaTokenizer returns no token type ids.
  single_.before = {special_.bos};
  single_.after = {special_.eos};
  pair_.before = {special_.bos};
  pair_.between = {special_.eos, special_.eos};
  pair_.after = {special_.eos};
}

EncoderTokenizer EncoderTokenizer::from_dir(const std::string& dir) {
  const fs::path d(dir);
  const fs::path config_path = d / "tokenizer_config.json";
  const json config = read_config(config_path);
  std::string tokenizer_class;
  if (config.contains("tokenizer_class") && config["tokenizer_class"].is_string()) {
    tokenizer_class = config["tokenizer_class"].get<std::string>();
  }
  const auto converted = fs::exists(d / "tokenizer.json") ? std::nullopt : convert_slow_tokenizer(dir, tokenizer_class);
  if (!converted) return EncoderTokenizer(ByteLevelBPE::from_dir(dir));

  EncoderTokenizer t;
  const auto hf = std::make_shared<const HfTokenizer>(
      HfTokenizer::from_json_text(converted->tokenizer_json, converted->name, read_file(config_path.string())));
  t.hf_ = hf;
  const std::string file = config_path.string();
  t.special_.pad = special_id(*hf, config, file, "pad_token");
  t.special_.unk = special_id(*hf, config, file, "unk_token");
  t.special_.mask = special_id(*hf, config, file, "mask_token");
  t.single_ = frame_of(*hf, false, converted->name);
  t.pair_ = frame_of(*hf, true, converted->name);
  t.vocab_file_ = converted->files.front();
  std::vector<fs::path> files(converted->files.begin(), converted->files.end());
  files.push_back(config_path);
  t.sha256_ = sha256_files(files);
  return t;
}

Encoding EncoderTokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  HfEncoding e = hf_->encode(text, false);
  return {std::move(e.ids), std::move(e.offsets)};
}

std::string EncoderTokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  return bpe_ ? bpe_->decode(ids, skip_special_tokens) : hf_->decode(ids, skip_special_tokens);
}

std::int64_t EncoderTokenizer::vocab_size() const { return bpe_ ? bpe_->vocab_size() : hf_->vocab_size(); }

}  // namespace evalrun
