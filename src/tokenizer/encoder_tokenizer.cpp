#include "tokenizer/encoder_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/slow_converters.hpp"
#include "tokenizer/slow_files.hpp"

namespace evalrun {

// XLMRobertaTokenizer: the sentencepiece model and the added tokens tokenizer_config.json lists.
struct XlmrSentencePiece {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
  struct Added {
    std::string content;
    std::int64_t id;
    bool lstrip, rstrip, special;
  };
  std::vector<Added> added;

  // The slow tokenizer's id of a sentencepiece id: + 1, sentencepiece's unk (0) is <unk> (3).
  static std::int64_t id_of(int sp_id) { return sp_id == 0 ? 3 : sp_id + 1; }

  void encode_part(std::string_view text, std::size_t at, const std::vector<std::size_t>& cp, Encoding& out) const {
    if (text.empty()) return;
    const auto spt = sp.EncodeAsImmutableProto(text);
    for (const auto& piece : spt.pieces()) {
      out.ids.push_back(id_of(static_cast<int>(piece.id())));
      auto to_cp = [&](std::size_t byte) {
        return static_cast<int>(std::lower_bound(cp.begin(), cp.end(), at + byte) - cp.begin());
      };
      out.offsets.emplace_back(to_cp(piece.begin()), to_cp(piece.end()));
    }
  }

  // transformers' slow tokenize(): added tokens split out (leftmost, longest first), the text around
  // an lstrip / rstrip token stripped on that side, every other non-empty part through sentencepiece.
  Encoding encode(std::string_view text) const {
    const std::vector<std::size_t> cp = utf8_code_point_starts(text);
    Encoding out;
    std::size_t start = 0, i = 0;
    bool strip_next_left = false;
    auto flush = [&](std::size_t end, bool strip_right) {
      std::size_t a = start, b = end;
      auto space_at = [&](std::size_t k) { return is_python_space(decode_utf8_at(text, k).code_point); };
      if (strip_next_left) {
        while (a < b && space_at(a)) a += static_cast<std::size_t>(decode_utf8_at(text, a).length);
      }
      if (strip_right) {
        while (b > a) {
          std::size_t k = b - 1;
          while (k > a && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
          if (!space_at(k)) break;
          b = k;
        }
      }
      encode_part(text.substr(a, b - a), a, cp, out);
    };
    while (i < text.size()) {
      const Added* hit = nullptr;
      for (const auto& t : added) {
        if (text.compare(i, t.content.size(), t.content) == 0 && (hit == nullptr || t.content.size() > hit->content.size())) {
          hit = &t;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      flush(i, hit->lstrip);
      const int a = static_cast<int>(std::lower_bound(cp.begin(), cp.end(), i) - cp.begin());
      i += hit->content.size();
      const int b = static_cast<int>(std::lower_bound(cp.begin(), cp.end(), i) - cp.begin());
      out.ids.push_back(hit->id);
      out.offsets.emplace_back(a, b);
      start = i;
      strip_next_left = hit->rstrip;
    }
    flush(text.size(), false);
    return out;
  }

  // transformers' slow decode(): runs of pieces joined with "▁" -> " " and stripped, added tokens
  // as their text, the parts joined by spaces, then clean_up_tokenization.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special) const {
    std::vector<std::string> parts;
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string t;
      for (std::size_t k = 0; k < run.size();) {
        if (run.compare(k, 3, "\xE2\x96\x81") == 0) {
          t += ' ';
          k += 3;
        } else {
          t += run[k++];
        }
      }
      const auto b = t.find_first_not_of(' '), e = t.find_last_not_of(' ');
      parts.push_back(b == std::string::npos ? "" : t.substr(b, e - b + 1));
      run.clear();
    };
    for (auto id : ids) {
      const Added* a = nullptr;
      for (const auto& t : added) {
        if (t.id == id) a = &t;
      }
      if (a != nullptr) {
        if (skip_special && a->special) continue;
        flush();
        parts.push_back(a->content);
        continue;
      }
      if (id < 4 || id - 1 >= sp.GetPieceSize()) continue;  // not a piece
      run += sp.IdToPiece(static_cast<int>(id - 1));
    }
    flush();
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : " ") + p;
    return hf::clean_up_tokenization(std::move(out));
  }
};

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

EncoderTokenizer EncoderTokenizer::xlm_roberta(const std::string& dir) {
  const fs::path d(dir);
  const std::string config_file = (d / "tokenizer_config.json").string();
  const json config = read_config(config_file);
  const fs::path model = d / "sentencepiece.bpe.model";
  if (!fs::exists(model)) throw InputError(model.string(), "missing: XLMRobertaTokenizer needs it");
  auto x = std::make_shared<XlmrSentencePiece>();
  x->path = model.string();
  const auto status = x->sp.Load(x->path);
  if (!status.ok()) throw InputError(x->path, "cannot load sentencepiece model: " + status.ToString());
  // fairseq's ids: <s> <pad> </s> <unk>, the pieces from 4 (sentencepiece's own 3 shifted by 1), <mask> last.
  const std::int64_t mask = x->sp.GetPieceSize() + 1;
  x->added = {{"<s>", 0, false, false, true}, {"<pad>", 1, false, false, true}, {"</s>", 2, false, false, true},
              {"<unk>", 3, false, false, true}, {"<mask>", mask, true, false, true}};
  for_each_added_token(config, config_file, [&](std::int64_t id, const json& v, const std::string& where) {
    if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
      throw InputError(where, "expected an object with a string \"content\"");
    }
    const std::string content = v["content"].get<std::string>();
    auto flag = [&](const char* key, bool fallback) {
      return v.contains(key) && v[key].is_boolean() ? v[key].get<bool>() : fallback;
    };
    for (auto& a : x->added) {
      if (a.content != content) continue;
      if (a.id != id) {
        throw InputError(where, json(content).dump() + " has id " + std::to_string(id) + "; XLMRobertaTokenizer gives it " +
                                    std::to_string(a.id));
      }
      a.lstrip = flag("lstrip", a.lstrip);
      a.rstrip = flag("rstrip", a.rstrip);
      return;
    }
    throw InputError(where, "added token " + json(content).dump() + " is not supported for XLMRobertaTokenizer");
  });
  EncoderTokenizer t;
  t.xlmr_ = x;
  t.special_ = {0, 2, 1, 3, mask};
  t.single_.before = t.pair_.before = {0};
  t.single_.after = t.pair_.after = {2};
  t.pair_.between = {2, 2};
  t.vocab_file_ = x->path;
  t.sha256_ = sha256_files({model, d / "tokenizer_config.json"});
  return t;
}

EncoderTokenizer EncoderTokenizer::from_dir(const std::string& dir) {
  const fs::path d(dir);
  const fs::path config_path = d / "tokenizer_config.json";
  const json config = read_config(config_path);
  std::string tokenizer_class;
  if (config.contains("tokenizer_class") && config["tokenizer_class"].is_string()) {
    tokenizer_class = config["tokenizer_class"].get<std::string>();
  }
  // tokenizer.json wins over every slow file, as transformers' AutoTokenizer loads the fast tokenizer.
  const fs::path fast_file = d / "tokenizer.json";
  if (fs::exists(fast_file)) return from_hf(HfTokenizer::from_file(fast_file.string()), dir, {fast_file});
  if (tokenizer_class == "XLMRobertaTokenizer" || tokenizer_class == "XLMRobertaTokenizerFast") return xlm_roberta(dir);
  const auto converted = convert_slow_tokenizer(dir, tokenizer_class);
  if (!converted) return EncoderTokenizer(ByteLevelBPE::from_dir(dir));
  const std::string config_text = fs::exists(config_path) ? read_file(config_path.string()) : std::string();
  std::vector<fs::path> files(converted->files.begin(), converted->files.end());
  return from_hf(HfTokenizer::from_json_text(converted->tokenizer_json, converted->name, config_text), dir, files);
}

EncoderTokenizer EncoderTokenizer::from_hf(HfTokenizer tok, const std::string& dir, std::vector<fs::path> files) {
  const fs::path d(dir);
  EncoderTokenizer t;
  const auto hf = std::make_shared<const HfTokenizer>(std::move(tok));
  t.hf_ = hf;
  // The special tokens as transformers reads them: tokenizer_config.json, then special_tokens_map.json
  // over it; a key neither names is RoBERTa's default name when the vocabulary has it (as ByteLevelBPE).
  const fs::path config_path = d / "tokenizer_config.json", map_path = d / "special_tokens_map.json";
  const json config = read_config(config_path), map = read_config(map_path);
  auto id_of = [&](const char* key, const char* fallback) {
    const std::int64_t from_map = special_id(*hf, map, map_path.string(), key);
    if (from_map >= 0) return from_map;
    const std::int64_t from_config = special_id(*hf, config, config_path.string(), key);
    if (from_config >= 0 || config.contains(key) || map.contains(key)) return from_config;
    return hf->token_to_id(fallback);
  };
  t.special_.bos = id_of("bos_token", "<s>");
  t.special_.eos = id_of("eos_token", "</s>");
  t.special_.pad = id_of("pad_token", "<pad>");
  t.special_.unk = id_of("unk_token", "<unk>");
  t.special_.mask = id_of("mask_token", "<mask>");
  t.single_ = frame_of(*hf, false, hf->file());
  t.pair_ = frame_of(*hf, true, hf->file());
  // Type ids only where the post-processor gives the second text its own type (BERT). RoBERTa- and
  // XLM-R-style frames type everything 0, and their tokenizers return no token_type_ids at all.
  auto zero = [](const std::vector<std::int64_t>& v) { return std::all_of(v.begin(), v.end(), [](auto x) { return x == 0; }); };
  const EncoderFrame& p = t.pair_;
  if (p.a_type == 0 && p.b_type == 0 && zero(p.before_types) && zero(p.between_types) && zero(p.after_types)) {
    for (EncoderFrame* f : {&t.single_, &t.pair_}) {
      f->before_types.clear();
      f->between_types.clear();
      f->after_types.clear();
    }
  }
  t.vocab_file_ = files.front().string();
  for (const fs::path& p : {config_path, map_path}) {
    if (fs::exists(p)) files.push_back(p);
  }
  t.sha256_ = sha256_files(files);
  return t;
}

Encoding EncoderTokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  if (xlmr_) return xlmr_->encode(text);
  HfEncoding e = hf_->encode(text, false);
  return {std::move(e.ids), std::move(e.offsets)};
}

std::string EncoderTokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  if (xlmr_) return xlmr_->decode(ids, skip_special_tokens);
  return bpe_ ? bpe_->decode(ids, skip_special_tokens) : hf_->decode(ids, skip_special_tokens);
}

std::int64_t EncoderTokenizer::vocab_size() const {
  if (xlmr_) return xlmr_->sp.GetPieceSize() + 2;
  return bpe_ ? bpe_->vocab_size() : hf_->vocab_size();
}

}  // namespace evalrun
