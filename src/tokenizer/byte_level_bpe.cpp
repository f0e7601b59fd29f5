// GPT-2 / RoBERTa byte-level BPE. Ids follow Hugging Face's slow RobertaTokenizer (added tokens split
// out first, GPT-2 regex pre-tokenization, byte -> printable map, lowest-rank merge applied everywhere
// until none applies); offsets follow the fast tokenizer (code points, whole character for partial
// bytes, trim_offsets).
#include <algorithm>
#include <climits>
#include <filesystem>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "tokenizer/slow_files.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "tokenizer/pretokenize.hpp"
#include "tokenizer/tokenizer.hpp"
#include "common/parse_limits.hpp"

namespace evalrun {

namespace fs = std::filesystem;
using bpe_detail::CodePoints;
using json = nlohmann::json;

namespace {

// A token matched literally in the text before pre-tokenization (special tokens and other added
// tokens). lstrip/rstrip: the token absorbs the whitespace before/after it.
struct AddedToken {
  std::string content;
  std::int64_t id = -1;
  bool lstrip = false;
  bool rstrip = false;
  bool special = true;
};

// One BPE output piece of a word: its id and how many of the word's bytes it covers.
struct Piece {
  std::int64_t id;
  int nbytes;
};

constexpr std::uint64_t pair_key(std::int64_t a, std::int64_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  check_json_nesting(text, path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(path, "malformed JSON: " + clip_text(e.what()));
  }
}

// The loaded model. A plain struct of this file so the helper functions can fill it;
// ByteLevelBPE::Impl is just this type.
struct BpeModel {
  std::unordered_map<std::string, std::int64_t> vocab;
  std::vector<std::string> id_to_token;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<int, std::int64_t>> merges;
  std::array<std::int64_t, 256> byte_id{};  // id of each byte's symbol, -1 if the vocab lacks it
  std::vector<AddedToken> added;            // longest content first (leftmost-longest matching)
  std::vector<bool> is_special_id;
  std::int64_t unk = -1;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<Piece>> cache;
  std::vector<std::string> id_bytes;  // what each id decodes to (before UTF-8 repair)

  void bpe_word(std::string_view bytes, std::vector<Piece>& out) const;
  void encode_text(const CodePoints& cps, std::string_view text, int begin, int end, Encoding& enc) const;
};

}  // namespace

struct ByteLevelBPE::Impl : BpeModel {};

// ---------------------------------------------------------------------------------------------
// BPE of one pre-token, exactly the slow tokenizer's loop: find the adjacent pair with the lowest
// merge rank, merge every occurrence of it left to right, repeat.
void BpeModel::bpe_word(std::string_view bytes, std::vector<Piece>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(std::string(bytes));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int64_t> ids(bytes.size());
  std::vector<int> lens(bytes.size(), 1);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    // A byte without a symbol in the vocab gets a negative stand-in that no merge matches.
    ids[i] = byte_id[b] >= 0 ? byte_id[b] : -1 - static_cast<std::int64_t>(b);
  }
  std::vector<std::int64_t> next_ids;
  std::vector<int> next_lens;
  while (ids.size() > 1) {
    int best_rank = INT_MAX;
    std::int64_t left = 0, right = 0, merged = 0;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i + 1] < 0) continue;
      auto it = merges.find(pair_key(ids[i], ids[i + 1]));
      if (it != merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        left = ids[i];
        right = ids[i + 1];
        merged = it->second.second;
      }
    }
    if (best_rank == INT_MAX) break;
    next_ids.clear();
    next_lens.clear();
    for (std::size_t i = 0; i < ids.size();) {
      if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
        next_ids.push_back(merged);
        next_lens.push_back(lens[i] + lens[i + 1]);
        i += 2;
      } else {
        next_ids.push_back(ids[i]);
        next_lens.push_back(lens[i]);
        i += 1;
      }
    }
    ids.swap(next_ids);
    lens.swap(next_lens);
  }
  std::vector<Piece> pieces;
  pieces.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::int64_t id = ids[i];
    if (id < 0) {
      if (unk < 0) {
        throw InputError("tokenizer", "text holds a byte that the vocabulary cannot represent and there is no <unk>");
      }
      id = unk;
    }
    pieces.push_back({id, lens[i]});
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() > 500000) cache.clear();  // bound memory on endless distinct input
  cache.emplace(std::string(bytes), std::move(pieces));
}

// Pre-tokenizes and BPE-encodes cps[begin, end) (no added tokens inside), appending ids and
// fast-tokenizer offsets.
void BpeModel::encode_text(const CodePoints& cps, std::string_view text, int begin, int end,
                                     Encoding& enc) const {
  std::vector<std::pair<int, int>> words;
  bpe_detail::split_gpt2(cps.cp, begin, end, words);
  std::vector<Piece> pieces;
  std::vector<int> byte_cp;  // code point index of each byte of the word
  for (const auto& [wb, we] : words) {
    const int b0 = cps.byte_pos[wb];
    const int b1 = cps.byte_pos[we];
    const std::string_view word = text.substr(static_cast<std::size_t>(b0), static_cast<std::size_t>(b1 - b0));
    byte_cp.assign(word.size(), 0);
    for (int c = wb; c < we; ++c) {
      for (int b = cps.byte_pos[c]; b < cps.byte_pos[c + 1]; ++b) byte_cp[b - b0] = c;
    }
    pieces.clear();
    bpe_word(word, pieces);
    int pos = 0;
    for (const Piece& p : pieces) {
      // Characters its bytes come from (a partial multi-byte character counts whole), then
      // trim_offsets: leading and trailing spaces leave the span; only-spaces gives [e, e).
      int start = byte_cp[pos];
      int stop = byte_cp[pos + p.nbytes - 1] + 1;
      int lead = 0, trail = 0;
      while (lead < p.nbytes && word[pos + lead] == ' ') ++lead;
      while (trail < p.nbytes && word[pos + p.nbytes - 1 - trail] == ' ') ++trail;
      if (lead > 0) start = std::min(start + lead, stop);
      if (trail > 0 && stop >= trail) stop = std::max(stop - trail, start);
      enc.ids.push_back(p.id);
      enc.offsets.emplace_back(start, stop);
      pos += p.nbytes;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

// Ids index dense tables (id -> token, id -> bytes), so one id far past the number of tokens would
// make a tiny file allocate gigabytes ({"a": 2147483647} asked for 64 GiB: found by fuzz_bpe). Real
// vocabularies are dense; ids may leave at most this many unused ids.
constexpr std::int64_t kMaxUnusedIds = 1 << 20;

std::int64_t json_id(const json& v, const std::string& where) {
  if (!v.is_number_integer()) throw InputError(where, "expected an integer token id, got " + v.dump());
  const auto id = v.get<std::int64_t>();
  if (id < 0 || id > INT32_MAX) throw InputError(where, "token id " + std::to_string(id) + " is out of range");
  return id;
}


std::vector<MergeRule> merges_from_json(const json& arr, const std::string& path) {
  if (!arr.is_array()) throw InputError(path + ": model.merges", "expected an array");
  std::vector<MergeRule> rules;
  rules.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string where = path + ": model.merges[" + std::to_string(i) + "]";
    const json& m = arr[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos) {
        throw InputError(where, "a merge rule must be two tokens separated by a space, got '" + s + "'");
      }
      rules.push_back({s.substr(0, sp), s.substr(sp + 1), where});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      rules.push_back({m[0].get<std::string>(), m[1].get<std::string>(), where});
    } else {
      throw InputError(where, "a merge rule must be \"a b\" or [\"a\", \"b\"], got " + m.dump());
    }
  }
  return rules;
}

void load_vocab_object(const json& obj, const std::string& where, BpeModel& impl) {
  if (!obj.is_object()) throw InputError(where, "expected a JSON object of token -> id");
  std::int64_t max_id = -1;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::int64_t id = json_id(it.value(), where + ": \"" + it.key() + "\"");
    impl.vocab[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (impl.vocab.empty()) throw InputError(where, "the vocabulary is empty");
  if (max_id >= static_cast<std::int64_t>(impl.vocab.size()) + kMaxUnusedIds) {
    throw InputError(where, "token id " + std::to_string(max_id) + " is far past the vocabulary's " +
                                std::to_string(impl.vocab.size()) + " entries (ids should be dense)");
  }
  impl.id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : impl.vocab) impl.id_to_token[static_cast<std::size_t>(id)] = tok;
}

void install_merges(const std::vector<MergeRule>& rules, BpeModel& impl) {
  impl.merges.reserve(rules.size() * 2);
  auto lookup = [&](const std::string& tok, const MergeRule& r) {
    auto it = impl.vocab.find(tok);
    if (it == impl.vocab.end()) throw InputError(r.where, "merge token '" + tok + "' is not in the vocabulary");
    return it->second;
  };
  for (std::size_t rank = 0; rank < rules.size(); ++rank) {
    const MergeRule& r = rules[rank];
    const std::int64_t a = lookup(r.left, r);
    const std::int64_t b = lookup(r.right, r);
    const std::int64_t m = lookup(r.left + r.right, r);
    // A repeated rule takes its later rank, as in the slow tokenizer's dict(zip(merges, range(n))).
    impl.merges[pair_key(a, b)] = {static_cast<int>(rank), m};
  }
}

void finish_byte_ids(BpeModel& impl) {
  const auto& sym = bpe_detail::byte_symbols();
  for (int b = 0; b < 256; ++b) {
    auto it = impl.vocab.find(sym[b]);
    impl.byte_id[b] = it == impl.vocab.end() ? -1 : it->second;
  }
}

// The special-token names a RobertaTokenizer uses unless its configuration says otherwise.
struct SpecialNames {
  std::string bos = "<s>", eos = "</s>", pad = "<pad>", unk = "<unk>", mask = "<mask>", cls = "<s>", sep = "</s>";
};

// Collects added tokens by content; later sources override earlier ones' flags.
class AddedTokenSet {
 public:
  AddedToken& get(const std::string& content) {
    auto it = index_.find(content);
    if (it != index_.end()) return tokens_[it->second];
    index_[content] = tokens_.size();
    tokens_.push_back(AddedToken{content});
    return tokens_.back();
  }
  std::vector<AddedToken>& tokens() { return tokens_; }
  // Ids at or past this are refused (see kMaxUnusedIds); set once the vocabulary is read.
  std::int64_t id_limit = kMaxUnusedIds;

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::size_t> index_;
};

// Reads {"content": ..., "lstrip": ..., ...} or a plain string; returns the content.
std::string read_added_token(const json& v, const std::string& where, AddedTokenSet& set,
                             std::optional<std::int64_t> id, bool special) {
  if (v.is_string()) {
    if (id && *id >= set.id_limit) {
      throw InputError(where, "token id " + std::to_string(*id) + " is far past the vocabulary (ids should be dense)");
    }
    AddedToken& t = set.get(v.get<std::string>());
    if (id) t.id = *id;
    t.special = t.special || special;
    return t.content;
  }
  if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
    throw InputError(where, "expected a token string or an object with \"content\", got " + v.dump());
  }
  AddedToken& t = set.get(v["content"].get<std::string>());
  if (id) t.id = *id;
  if (v.contains("id")) t.id = json_id(v["id"], where + ".id");
  if (t.id >= set.id_limit) {
    throw InputError(where, "token id " + std::to_string(t.id) + " is far past the vocabulary (ids should be dense)");
  }
  auto flag = [&](const char* key, bool& dst) {
    if (!v.contains(key)) return;
    if (!v[key].is_boolean()) throw InputError(where + "." + key, "expected true or false");
    dst = v[key].get<bool>();
  };
  flag("lstrip", t.lstrip);
  flag("rstrip", t.rstrip);
  if (v.contains("special")) {
    flag("special", t.special);
  } else {
    t.special = special;
  }
  return t.content;
}

// special_tokens_map.json / tokenizer_config.json keys for the named special tokens.
void read_special_names(const json& cfg, const std::string& path, SpecialNames& names, AddedTokenSet& set) {
  if (!cfg.is_object()) throw InputError(path, "expected a JSON object");
  const std::pair<const char*, std::string*> keys[] = {
      {"bos_token", &names.bos}, {"eos_token", &names.eos}, {"pad_token", &names.pad}, {"unk_token", &names.unk},
      {"mask_token", &names.mask}, {"cls_token", &names.cls}, {"sep_token", &names.sep}};
  for (const auto& [key, dst] : keys) {
    if (!cfg.contains(key) || cfg[key].is_null()) continue;
    *dst = read_added_token(cfg[key], path + ": " + key, set, std::nullopt, true);
  }
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    const json& arr = cfg["additional_special_tokens"];
    for (std::size_t i = 0; i < arr.size(); ++i) {
      read_added_token(arr[i], path + ": additional_special_tokens[" + std::to_string(i) + "]", set, std::nullopt,
                       true);
    }
  }
}

}  // namespace

namespace {

// Shared tail of every loader: added tokens (defaults, then the configuration files of `dir`,
// then tokenizer.json's list) get ids and become the literal-match table; SpecialTokens filled.
void finish_added_tokens(BpeModel& impl, AddedTokenSet& set, const SpecialNames& names,
                         SpecialTokens& special) {
  std::vector<AddedToken> kept;
  for (AddedToken t : set.tokens()) {
    if (t.content.empty()) continue;
    if (t.id < 0) {
      auto it = impl.vocab.find(t.content);
      if (it == impl.vocab.end()) continue;  // a default name this vocabulary does not have
      t.id = it->second;
    }
    if (static_cast<std::size_t>(t.id) >= impl.id_to_token.size()) impl.id_to_token.resize(t.id + 1);
    if (impl.id_to_token[t.id].empty()) impl.id_to_token[t.id] = t.content;
    impl.vocab.emplace(t.content, t.id);
    kept.push_back(t);
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  impl.added = std::move(kept);
  impl.is_special_id.assign(impl.id_to_token.size(), false);
  for (const AddedToken& t : impl.added) {
    if (t.special) impl.is_special_id[t.id] = true;
  }
  auto id_of = [&](const std::string& name) -> std::int64_t {
    auto it = impl.vocab.find(name);
    return it == impl.vocab.end() ? -1 : it->second;
  };
  // Each character of a vocabulary token stands for one byte; an added token, or a character that
  // is no byte stand-in, decodes to its own UTF-8.
  std::vector<bool> is_added(impl.id_to_token.size(), false);
  for (const AddedToken& t : impl.added) is_added[t.id] = true;
  impl.id_bytes.assign(impl.id_to_token.size(), std::string());
  for (std::size_t id = 0; id < impl.id_to_token.size(); ++id) {
    const std::string& tok = impl.id_to_token[id];
    const CodePoints cps = bpe_detail::to_code_points(tok);
    std::string& out = impl.id_bytes[id];
    for (std::size_t i = 0; i < cps.cp.size(); ++i) {
      const int byte = bpe_detail::symbol_to_byte(cps.cp[i]);
      if (byte >= 0 && !is_added[id]) {
        out.push_back(static_cast<char>(byte));
      } else {
        out.append(tok, cps.byte_pos[i], cps.byte_pos[i + 1] - cps.byte_pos[i]);
      }
    }
  }
  special.bos = id_of(names.bos);
  special.eos = id_of(names.eos);
  special.pad = id_of(names.pad);
  special.unk = id_of(names.unk);
  special.mask = id_of(names.mask);
  impl.unk = special.unk;
}

}  // namespace

ByteLevelBPE ByteLevelBPE::from_dir(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw InputError(dir, "tokenizer directory does not exist");
  auto impl = std::make_shared<Impl>();
  std::vector<fs::path> read;
  AddedTokenSet set;
  SpecialNames names;
  // RobertaTokenizer's defaults; <mask> is always created with lstrip=True by that class.
  for (const char* s : {"<s>", "<pad>", "</s>", "<unk>"}) set.get(s);
  set.get("<mask>").lstrip = true;

  const fs::path tj = d / "tokenizer.json";
  json tokenizer_json;
  if (fs::exists(tj)) {
    const std::string path = tj.string();
    tokenizer_json = parse_json_file(path);
    read.push_back(tj);
    if (!tokenizer_json.is_object() || !tokenizer_json.contains("model") || !tokenizer_json["model"].is_object()) {
      throw InputError(path, "missing \"model\" object");
    }
    const json& model = tokenizer_json["model"];
    // json::value() throws type_error on a present key of another type: check the type first.
    auto string_key = [&](const json& obj, const char* key, const std::string& fallback, const std::string& where) {
      if (!obj.contains(key)) return fallback;
      if (!obj[key].is_string()) throw InputError(where, "expected a string, got " + obj[key].dump());
      return obj[key].get<std::string>();
    };
    auto bool_key = [&](const json& obj, const char* key, bool fallback, const std::string& where) {
      if (!obj.contains(key)) return fallback;
      if (!obj[key].is_boolean()) throw InputError(where, "expected true or false, got " + obj[key].dump());
      return obj[key].get<bool>();
    };
    const std::string type = string_key(model, "type", "BPE", path + ": model.type");
    if (type != "BPE") throw InputError(path + ": model.type", "only BPE tokenizers are supported, got '" + type + "'");
    if (!model.contains("vocab")) throw InputError(path + ": model.vocab", "missing");
    if (!model.contains("merges")) throw InputError(path + ": model.merges", "missing");
    // Only GPT-2's byte-level pre-tokenization is implemented: a tokenizer.json that splits or normalizes
    // text otherwise (Llama 3's Split pattern, a prefix space, a normalizer) would get other ids, so it is
    // refused rather than silently mis-tokenized.
    if (tokenizer_json.contains("normalizer") && !tokenizer_json["normalizer"].is_null()) {
      throw InputError(path + ": normalizer", "tokenizer normalizers are not supported (only null)");
    }
    if (tokenizer_json.contains("pre_tokenizer") && !tokenizer_json["pre_tokenizer"].is_null()) {
      const json& pre = tokenizer_json["pre_tokenizer"];
      const std::string pre_type = pre.is_object() ? string_key(pre, "type", "", path + ": pre_tokenizer.type") : "";
      if (pre_type != "ByteLevel") {
        throw InputError(path + ": pre_tokenizer",
                         "only the GPT-2 \"ByteLevel\" pre-tokenizer is supported, got '" + pre_type + "'");
      }
      if (bool_key(pre, "add_prefix_space", false, path + ": pre_tokenizer.add_prefix_space")) {
        throw InputError(path + ": pre_tokenizer.add_prefix_space", "true is not supported");
      }
      if (!bool_key(pre, "use_regex", true, path + ": pre_tokenizer.use_regex")) {
        throw InputError(path + ": pre_tokenizer.use_regex", "false is not supported");
      }
    }
    load_vocab_object(model["vocab"], path + ": model.vocab", *impl);
    install_merges(merges_from_json(model["merges"], path), *impl);
  } else {
    const fs::path vj = d / "vocab.json";
    const fs::path mt = d / "merges.txt";
    if (!fs::exists(vj)) throw InputError(vj.string(), "missing (need tokenizer.json or vocab.json + merges.txt)");
    if (!fs::exists(mt)) throw InputError(mt.string(), "missing (need tokenizer.json or vocab.json + merges.txt)");
    load_vocab_object(parse_json_file(vj.string()), vj.string(), *impl);
    install_merges(read_merges_txt(mt.string()), *impl);
    read.push_back(vj);
    read.push_back(mt);
  }

  set.id_limit = static_cast<std::int64_t>(impl->id_to_token.size()) + kMaxUnusedIds;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const fs::path p = d / name;
    if (!fs::exists(p)) continue;
    const std::string path = p.string();
    const json cfg = parse_json_file(path);
    read.push_back(p);
    read_special_names(cfg, path, names, set);
    for_each_added_token(cfg, path, [&](std::int64_t id, const json& entry, const std::string& where) {
      read_added_token(entry, where, set, id, true);
    });
  }
  if (tokenizer_json.is_object() && tokenizer_json.contains("added_tokens")) {
    const json& arr = tokenizer_json["added_tokens"];
    if (!arr.is_array()) throw InputError(tj.string() + ": added_tokens", "expected an array");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      read_added_token(arr[i], tj.string() + ": added_tokens[" + std::to_string(i) + "]", set, std::nullopt, true);
    }
  }

  finish_byte_ids(*impl);
  ByteLevelBPE tok;
  finish_added_tokens(*impl, set, names, tok.special_);
  tok.impl_ = std::move(impl);
  tok.sha256_ = sha256_files(read);
  tok.vocab_file_ = read.front().string();  // tokenizer.json or vocab.json, read first
  return tok;
}

ByteLevelBPE ByteLevelBPE::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  if (!fs::exists(vocab_json)) throw InputError(vocab_json, "missing");
  if (!fs::exists(merges_txt)) throw InputError(merges_txt, "missing");
  auto impl = std::make_shared<Impl>();
  load_vocab_object(parse_json_file(vocab_json), vocab_json, *impl);
  install_merges(read_merges_txt(merges_txt), *impl);
  finish_byte_ids(*impl);
  AddedTokenSet set;
  for (const char* s : {"<s>", "<pad>", "</s>", "<unk>"}) set.get(s);
  set.get("<mask>").lstrip = true;
  ByteLevelBPE tok;
  finish_added_tokens(*impl, set, SpecialNames{}, tok.special_);
  tok.impl_ = std::move(impl);
  tok.sha256_ = sha256_files({fs::path(vocab_json), fs::path(merges_txt)});
  tok.vocab_file_ = vocab_json;
  return tok;
}

// ---------------------------------------------------------------------------------------------
// Encoding / decoding

Encoding ByteLevelBPE::encode(std::string_view text) const {
  const Impl& im = *impl_;
  const CodePoints cps = bpe_detail::to_code_points(text);
  const int ncp = static_cast<int>(cps.cp.size());

  // Added tokens, leftmost-longest, as the slow tokenizer's trie split. Matches are on bytes;
  // both sides are UTF-8, so they start and end on code-point boundaries.
  struct Match {
    int cp_begin, cp_end;
    const AddedToken* tok;
  };
  std::vector<Match> matches;
  if (!im.added.empty()) {
    for (int c = 0; c < ncp; ++c) {
      const std::size_t b = static_cast<std::size_t>(cps.byte_pos[c]);
      for (const AddedToken& t : im.added) {  // longest first
        if (text.compare(b, t.content.size(), t.content) != 0) continue;
        const std::size_t e = b + t.content.size();
        int ce = c;
        while (ce < ncp && static_cast<std::size_t>(cps.byte_pos[ce]) < e) ++ce;
        if (static_cast<std::size_t>(cps.byte_pos[ce]) != e) continue;  // not on a character boundary
        matches.push_back({c, ce, &t});
        c = ce - 1;
        break;
      }
    }
  }

  Encoding enc;
  enc.ids.reserve(text.size() / 3 + 4);
  enc.offsets.reserve(text.size() / 3 + 4);
  int pos = 0;
  for (std::size_t m = 0; m <= matches.size(); ++m) {
    // Text between the previous match and this one, less the whitespace the neighbours absorb
    // (Python str.rstrip()/lstrip() on the neighbouring pieces in the slow tokenizer).
    int b = pos;
    int e = m < matches.size() ? matches[m].cp_begin : ncp;
    if (m > 0 && matches[m - 1].tok->rstrip) {
      while (b < e && bpe_detail::is_python_space(cps.cp[b])) ++b;
    }
    if (m < matches.size() && matches[m].tok->lstrip) {
      while (e > b && bpe_detail::is_python_space(cps.cp[e - 1])) --e;
    }
    if (b < e) im.encode_text(cps, text, b, e, enc);
    if (m < matches.size()) {
      enc.ids.push_back(matches[m].tok->id);
      enc.offsets.emplace_back(matches[m].cp_begin, matches[m].cp_end);
      pos = matches[m].cp_end;
    }
  }
  return enc;
}

std::string ByteLevelBPE::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::string bytes;
  for (const std::int64_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= im.id_to_token.size()) {
      throw InputError("decode", "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                     std::to_string(im.id_to_token.size()) + ")");
    }
    if (skip_special_tokens && im.is_special_id[id]) continue;
    bytes += im.id_bytes[id];
  }
  return bpe_detail::utf8_replace_invalid(bytes);
}

std::int64_t ByteLevelBPE::token_to_id(const std::string& token) const {
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

const std::string& ByteLevelBPE::id_to_token(std::int64_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_token.size()) {
    throw InputError("tokenizer", "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                      std::to_string(impl_->id_to_token.size()) + ")");
  }
  return impl_->id_to_token[id];
}

std::int64_t ByteLevelBPE::vocab_size() const { return static_cast<std::int64_t>(impl_->id_to_token.size()); }

}  // namespace evalrun
