#include "tokenizer/decoder_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/errors.hpp"
#include "tokenizer/slow_files.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"
#include "tokenizer/slow_converters.hpp"
#include "tokenizer/tokenizer.hpp"
#include "common/parse_limits.hpp"

namespace evalrun {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct DecoderTokenizer::Impl {
  std::optional<SentencePieceTokenizer> sp;
  sentencepiece::SentencePieceProcessor pieces;  // piece <-> id look-ups for the sentencepiece model
  std::optional<ByteLevelBPE> bpe;
  std::optional<HfTokenizer> hf;  // tokenizer.json: the whole pipeline the file describes
  // Added tokens (tokenizer_config.json added_tokens_decoder and the named special tokens):
  // content -> id, and the list longest content first for splitting prompt text.
  std::unordered_map<std::string, std::int64_t> added;
  std::vector<std::pair<std::string, std::int64_t>> added_longest_first;
  std::unordered_map<std::int64_t, std::string> added_content;
  std::unordered_set<std::int64_t> special;
  bool space_before_special = true;  // sentencepiece decode: LlamaTokenizer's legacy space (SlowClass)

  std::int64_t vocab_size() const { return hf ? hf->vocab_size() : sp ? sp->vocab_size() : bpe->vocab_size(); }

  // Content -> id: added tokens, then the model's vocabulary; -1 when absent.
  std::int64_t token_to_id(const std::string& content) const {
    if (auto it = added.find(content); it != added.end()) return it->second;
    if (hf) return hf->token_to_id(content);
    if (sp) {
      const int id = pieces.PieceToId(content);
      // PieceToId answers unk for unknown pieces: check that the piece really is this one.
      if (id >= 0 && id < pieces.GetPieceSize() && pieces.IdToPiece(id) == content) return id;
      return -1;
    }
    return bpe->token_to_id(content);
  }
};

namespace {

std::optional<json> read_json_if_exists(const fs::path& p, std::vector<fs::path>& read) {
  if (!fs::exists(p)) return std::nullopt;
  json j;
  try {
    const std::string text = read_file(p.string());
    check_json_nesting(text, p.string());
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(p.string(), "malformed JSON: " + clip_text(e.what()));
  }
  if (!j.is_object()) throw InputError(p.string(), "expected a JSON object");
  read.push_back(p);
  return j;
}

// A special-token entry: a string, an AddedToken object {"content": ...}, or null / absent (none).
std::optional<std::string> token_content(const json& cfg, const std::string& key, const std::string& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw InputError(file + ": " + key, "expected a token string or an object with \"content\", got " + v.dump());
}

// An id entry of generation_config.json / config.json: an int, a list of ints, or null / absent.
std::vector<std::int64_t> id_list(const json& cfg, const std::string& key, const std::string& file) {
  std::vector<std::int64_t> out;
  if (!cfg.contains(key) || cfg[key].is_null()) return out;
  const json& v = cfg[key];
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<long long>() < 0) {
      throw InputError(file + ": " + key, "expected a non-negative token id or a list of them, got " + v.dump());
    }
    const auto id = x.get<std::int64_t>();
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (v.is_array()) {
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return out;
}

bool bool_key(const json& cfg, const std::string& key, const std::string& file, bool fallback) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  if (!cfg[key].is_boolean()) throw InputError(file + ": " + key, "expected true or false");
  return cfg[key].get<bool>();
}

// The tokenizer_config.json "tokenizer_class" values the slow readers read, one row per class (the
// "Fast" variant too: without a tokenizer.json, transformers converts the same slow files). Another
// class reads the same files its own way (CodeGenTokenizer, T5Tokenizer, ...), so it is refused
// rather than tokenized differently. A tokenizer.json describes itself and needs no class.
struct SlowClass {
  const char* name;
  const char* kind;  // the files it reads: "sentencepiece" (tokenizer.model) or "byte-level-bpe"
  // LlamaTokenizer.convert_tokens_to_string writes a space when a special token follows ordinary
  // text and legacy is true (tokenizer_config.json "legacy", default true); GemmaTokenizer._decode
  // joins added tokens and text with nothing between.
  // Both encode as sentencepiece.encode of the text between added tokens (legacy Llama behaviour).
  bool legacy_space_before_special;
};
const SlowClass kSlowClasses[] = {
    {"LlamaTokenizer", "sentencepiece", true},
    {"GemmaTokenizer", "sentencepiece", false},
    {"GPT2Tokenizer", "byte-level-bpe", false},
    {"RobertaTokenizer", "byte-level-bpe", false},
};

// The row of tokenizer_config.json's tokenizer_class for the slow files of `kind`; nullptr when it
// names none (then the kind's reader is used as is, as transformers' AutoTokenizer would guess).
const SlowClass* slow_class(const json& tc, const std::string& kind, const std::string& file) {
  if (!tc.contains("tokenizer_class") || tc["tokenizer_class"].is_null()) return nullptr;
  if (!tc["tokenizer_class"].is_string()) throw InputError(file + ": tokenizer_class", "expected a string");
  const std::string name = tc["tokenizer_class"].get<std::string>();
  const std::string fast = "Fast";
  const std::string base =
      name.size() > fast.size() && name.compare(name.size() - fast.size(), fast.size(), fast) == 0
          ? name.substr(0, name.size() - fast.size())
          : name;
  std::string list;
  for (const auto& c : kSlowClasses) {
    if (kind != c.kind) continue;
    if (base == c.name) return &c;
    list += (list.empty() ? "" : ", ") + std::string(c.name);
  }
  throw InputError(file + ": tokenizer_class", "'" + clip_text(name) + "' is not supported for a " + kind +
                                                   " tokenizer without tokenizer.json (supported: " + list + ")");
}

}  // namespace

DecoderTokenizer DecoderTokenizer::from_dir(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw InputError(dir, "tokenizer directory does not exist");
  auto impl = std::make_shared<Impl>();
  std::vector<fs::path> read;
  DecoderTokenizer t;

  const fs::path spm = d / "tokenizer.model";
  // The class tokenizer_config.json names, for the slow classes evalrun reads by conversion.
  std::string tokenizer_class;
  {
    std::vector<fs::path> ignored;  // read again below, where it counts
    const auto tc = read_json_if_exists(d / "tokenizer_config.json", ignored);
    if (tc && tc->contains("tokenizer_class") && (*tc)["tokenizer_class"].is_string()) {
      tokenizer_class = (*tc)["tokenizer_class"].get<std::string>();
    }
  }
  std::optional<ConvertedTokenizer> converted;
  if (fs::exists(d / "tokenizer.json")) {
    // tokenizer.json wins over tokenizer.model, as transformers' AutoTokenizer loads the fast tokenizer.
    impl->hf = HfTokenizer::from_file((d / "tokenizer.json").string());
    read.push_back(d / "tokenizer.json");
    t.kind_ = "tokenizer.json";
  } else if ((converted = convert_slow_tokenizer(dir, tokenizer_class))) {
    // A slow class transformers converts to a fast tokenizer (slow_converters.hpp).
    const fs::path tc_file = d / "tokenizer_config.json";
    impl->hf = HfTokenizer::from_json_text(converted->tokenizer_json, converted->name, read_file(tc_file.string()));
    for (const auto& f : converted->files) read.push_back(f);
    t.kind_ = "tokenizer.json";
  } else if (fs::exists(spm)) {
    impl->sp = SentencePieceTokenizer::from_file(spm.string());
    const auto status = impl->pieces.Load(spm.string());
    if (!status.ok()) throw InputError(spm.string(), "cannot load sentencepiece model: " + status.ToString());
    read.push_back(spm);
    t.kind_ = "sentencepiece";
  } else if (fs::exists(d / "vocab.json")) {
    impl->bpe = ByteLevelBPE::from_dir(dir);
    t.kind_ = "byte-level-bpe";
    for (const char* f : {"vocab.json", "merges.txt"}) {
      if (fs::exists(d / f)) read.push_back(d / f);
    }
  } else {
    throw InputError(dir, "no tokenizer: need tokenizer.model (sentencepiece), tokenizer.json, or vocab.json + merges.txt");
  }

  const fs::path tc_path = d / "tokenizer_config.json";
  const fs::path stm_path = d / "special_tokens_map.json";
  const auto tc = read_json_if_exists(tc_path, read);
  const SlowClass* cls = tc && t.kind_ != "tokenizer.json" ? slow_class(*tc, t.kind_, tc_path.string()) : nullptr;
  const auto stm = read_json_if_exists(stm_path, read);
  std::vector<fs::path> unused;  // generation/model configs are not tokenizer files: not in its sha256
  const auto gen = read_json_if_exists(d / "generation_config.json", unused);
  const auto cfg = read_json_if_exists(d / "config.json", unused);
  const std::string gen_file = (d / "generation_config.json").string();
  const std::string cfg_file = (d / "config.json").string();

  // Added tokens with their ids.
  if (tc) {
    for_each_added_token(*tc, tc_path.string(), [&](std::int64_t id, const json& v, const std::string& where) {
      if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
        throw InputError(where, "expected an object with a string \"content\"");
      }
      const std::string content = v["content"].get<std::string>();
      impl->added[content] = id;
      impl->added_content[id] = content;
      if (v.contains("special") && !v["special"].is_boolean()) {
        throw InputError(where + ".special", "expected true or false");  // value() would throw type_error
      }
      if (v.value("special", false)) impl->special.insert(id);
    });
  }

  // Named special tokens: tokenizer_config.json, then special_tokens_map.json.
  auto named = [&](const std::string& key) -> std::pair<std::optional<std::string>, std::string> {
    if (tc) {
      if (auto c = token_content(*tc, key, tc_path.string())) return {c, tc_path.string()};
    }
    if (stm) {
      if (auto c = token_content(*stm, key, stm_path.string())) return {c, stm_path.string()};
    }
    return {std::nullopt, ""};
  };
  auto resolve = [&](const std::string& key) -> std::int64_t {
    auto [content, file] = named(key);
    if (!content) return -1;
    const std::int64_t id = impl->token_to_id(*content);
    if (id < 0) throw InputError(file + ": " + key, "token '" + *content + "' is not in the tokenizer's vocabulary");
    if (!impl->added.count(*content)) {
      impl->added[*content] = id;
      impl->added_content[id] = *content;
    }
    impl->special.insert(id);
    return id;
  };
  t.bos_ = resolve("bos_token");
  t.eos_ = resolve("eos_token");
  t.pad_ = resolve("pad_token");
  t.unk_ = resolve("unk_token");
  if (tc && tc->contains("additional_special_tokens") && (*tc)["additional_special_tokens"].is_array()) {
    for (const auto& v : (*tc)["additional_special_tokens"]) {
      std::optional<std::string> c;
      if (v.is_string()) c = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) c = v["content"].get<std::string>();
      if (!c) continue;
      const std::int64_t id = impl->token_to_id(*c);
      if (id >= 0) {
        impl->added[*c] = id;
        impl->added_content[id] = *c;
        impl->special.insert(id);
      }
    }
  }

  // The sentencepiece model's own ids, then generation_config.json, then config.json.
  auto first_of = [](const std::vector<std::int64_t>& v) { return v.empty() ? std::int64_t{-1} : v.front(); };
  if (impl->sp) {
    if (t.bos_ < 0) t.bos_ = impl->sp->bos_id();
    if (t.eos_ < 0) t.eos_ = impl->sp->eos_id();
    if (t.unk_ < 0) t.unk_ = impl->sp->unk_id();
    if (t.pad_ < 0) t.pad_ = impl->sp->pad_id();  // -1 unless the model defines one
  }
  std::vector<std::int64_t> gen_eos, cfg_eos;
  std::int64_t gen_pad = -1, cfg_pad = -1;
  if (gen) {
    if (t.bos_ < 0) t.bos_ = first_of(id_list(*gen, "bos_token_id", gen_file));
    gen_eos = id_list(*gen, "eos_token_id", gen_file);
    gen_pad = first_of(id_list(*gen, "pad_token_id", gen_file));
  }
  if (cfg) {
    if (t.bos_ < 0) t.bos_ = first_of(id_list(*cfg, "bos_token_id", cfg_file));
    cfg_eos = id_list(*cfg, "eos_token_id", cfg_file);
    cfg_pad = first_of(id_list(*cfg, "pad_token_id", cfg_file));
  }

  if (!gen_eos.empty()) t.stop_ids_ = gen_eos;
  else if (t.eos_ >= 0) t.stop_ids_ = {t.eos_};
  else t.stop_ids_ = cfg_eos;
  if (t.eos_ < 0) t.eos_ = first_of(t.stop_ids_);
  if (t.pad_ < 0) t.pad_ = gen_pad >= 0 ? gen_pad : cfg_pad;
  if (t.pad_ < 0) t.pad_ = first_of(t.stop_ids_);

  for (std::int64_t id : {t.bos_, t.eos_, t.pad_, t.unk_}) {
    if (id >= 0) impl->special.insert(id);
  }
  for (std::int64_t id : t.stop_ids_) impl->special.insert(id);
  if (impl->hf) {
    for (std::int64_t id = 0; id < impl->hf->vocab_size(); ++id) {
      if (impl->hf->is_special(id)) impl->special.insert(id);
    }
  }
  if (impl->sp) {
    // Control pieces (<s>, </s>, user-defined controls) are never text.
    for (int id = 0; id < impl->pieces.GetPieceSize(); ++id) {
      if (impl->pieces.IsControl(id)) impl->special.insert(id);
    }
  }

  bool add_bos = true;  // LlamaTokenizer's default, and the seed's behaviour when nothing says otherwise
  if (tc) {
    add_bos = bool_key(*tc, "add_bos_token", tc_path.string(), true);
    t.add_eos_ = bool_key(*tc, "add_eos_token", tc_path.string(), false);
    impl->space_before_special =
        bool_key(*tc, "legacy", tc_path.string(), true) && (cls == nullptr || cls->legacy_space_before_special);
  }
  t.adds_bos_ = add_bos && t.bos_ >= 0 && t.bos_ != t.eos_;
  if (impl->hf) {
    // A fast tokenizer's post-processor decides, whatever add_bos_token says: BOS when it puts one first.
    const auto with_specials = impl->hf->encode("", true).ids;
    t.adds_bos_ = t.bos_ >= 0 && !with_specials.empty() && with_specials.front() == t.bos_;
  }

  for (const auto& [content, id] : impl->added) {
    if (!content.empty()) impl->added_longest_first.emplace_back(content, id);
  }
  std::sort(impl->added_longest_first.begin(), impl->added_longest_first.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.first < b.first;
  });

  t.sha256_ = sha256_files(read);
  t.impl_ = std::move(impl);
  return t;
}

std::vector<std::int64_t> DecoderTokenizer::encode_without_bos(std::string_view text) const {
  if (impl_->hf) return impl_->hf->encode(text, false).ids;
  if (impl_->bpe) return impl_->bpe->encode(text).ids;
  // Sentencepiece: split out added-token strings first (transformers' slow tokenizer does the
  // same), then each remaining piece of text through sentencepiece on its own.
  std::vector<std::int64_t> ids;
  std::size_t start = 0, i = 0;
  auto flush = [&](std::size_t end) {
    if (end > start) {
      auto part = impl_->sp->encode(text.substr(start, end - start));
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  while (i < text.size()) {
    bool matched = false;
    for (const auto& [content, id] : impl_->added_longest_first) {
      if (text.compare(i, content.size(), content) == 0) {
        flush(i);
        ids.push_back(id);
        i += content.size();
        start = i;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  flush(text.size());
  return ids;
}

std::vector<std::int64_t> DecoderTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (adds_bos_) ids.push_back(bos_);
  auto rest = encode_without_bos(text);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

bool DecoderTokenizer::is_special(std::int64_t id) const { return impl_->special.count(id) != 0; }

std::int64_t DecoderTokenizer::vocab_size() const { return impl_->vocab_size(); }

std::string DecoderTokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  // The ids a decode keeps: not skipped as special, inside the tokenizer (a padded model vocabulary
  // has ids past it).
  const auto kept = [&](std::int64_t vocab) {
    std::vector<std::int64_t> out;
    out.reserve(ids.size());
    for (auto id : ids) {
      if ((skip_special_tokens && m.special.count(id)) || id < 0 || id >= vocab) continue;
      out.push_back(id);
    }
    return out;
  };
  if (m.hf) return m.hf->decode(kept(m.hf->vocab_size()), skip_special_tokens);
  if (m.bpe) return m.bpe->decode(kept(m.bpe->vocab_size()), skip_special_tokens);
  // Sentencepiece, as LlamaTokenizer.convert_tokens_to_string: runs of ordinary pieces go through
  // sentencepiece; special and added tokens are written as their text.
  const std::int64_t n_pieces = m.pieces.GetPieceSize();
  std::string out;
  std::vector<std::int64_t> run;
  bool prev_special = false;
  bool first = true;
  for (auto id : ids) {
    const bool special = m.special.count(id) != 0;
    if (special && skip_special_tokens) continue;
    const auto added = m.added_content.find(id);
    // A stop or pad id from generation_config.json / config.json past the sentencepiece model (a
    // padded model vocabulary) has no text: IdToPiece would read past the piece table (SEGV,
    // reproduced by fuzz_sentencepiece).
    if (added == m.added_content.end() && (id < 0 || id >= n_pieces)) continue;
    if (special || added != m.added_content.end()) {
      if (special && !prev_special && !first && m.space_before_special) out += ' ';
      if (!run.empty()) out += m.sp->decode(run);
      run.clear();
      out += added != m.added_content.end() ? added->second : m.pieces.IdToPiece(static_cast<int>(id));
      prev_special = special;
    } else {
      run.push_back(id);
      prev_special = false;
    }
    first = false;
  }
  if (!run.empty()) out += m.sp->decode(run);
  return out;
}

}  // namespace evalrun
