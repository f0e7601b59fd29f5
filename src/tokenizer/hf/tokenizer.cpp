// The tokenizer.json pipeline put together: added tokens, then the five stages from the registries.
#include <unicode/uchar.h>

#include <filesystem>
#include <unordered_map>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"
#include "tokenizer/hf/pipeline.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace evalrun {
namespace fs = std::filesystem;
using hf::json;
using hf::JsonPath;
using hf::NString;

namespace {

struct AddedToken {
  std::int64_t id;
  std::string content;
  std::u32string match;  // what is looked for: the content, normalized when `normalized`
  bool special, lstrip, rstrip, single_word, normalized;
};

// Added-token contents as a trie over code points, for leftmost-longest matching.
class Trie {
 public:
  void add(const std::u32string& s, int token) {
    if (s.empty()) return;
    int node = 0;
    for (char32_t c : s) {
      auto it = nodes_[static_cast<std::size_t>(node)].next.find(c);
      if (it == nodes_[static_cast<std::size_t>(node)].next.end()) {
        nodes_.emplace_back();
        const int fresh = static_cast<int>(nodes_.size()) - 1;
        nodes_[static_cast<std::size_t>(node)].next.emplace(c, fresh);
        node = fresh;
      } else {
        node = it->second;
      }
    }
    nodes_[static_cast<std::size_t>(node)].token = token;
  }
  bool empty() const { return nodes_.size() == 1; }
  // The longest token starting at s[i]: (token, end) or (-1, i).
  std::pair<int, std::size_t> longest(const std::u32string& s, std::size_t i) const {
    int node = 0, best = -1;
    std::size_t best_end = i;
    for (std::size_t j = i; j < s.size(); ++j) {
      auto it = nodes_[static_cast<std::size_t>(node)].next.find(s[j]);
      if (it == nodes_[static_cast<std::size_t>(node)].next.end()) break;
      node = it->second;
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        best = nodes_[static_cast<std::size_t>(node)].token;
        best_end = j + 1;
      }
    }
    return {best, best_end};
  }

 private:
  struct Node {
    std::unordered_map<char32_t, int> next;
    int token = -1;
  };
  std::vector<Node> nodes_{1};
};

bool is_word_char(char32_t c) {
  return c == U'_' || u_isUAlphabetic(static_cast<UChar32>(c)) || hf::is_numeric(c);
}

struct Segment {
  NString text;
  int added = -1;  // index into the added tokens, or -1 for text
};

}  // namespace

struct HfTokenizer::Impl {
  std::string file;
  std::unique_ptr<hf::Normalizer> normalizer;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer;
  std::unique_ptr<hf::Model> model;
  std::unique_ptr<hf::PostProcessor> post_processor;
  std::unique_ptr<hf::Decoder> decoder;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, std::size_t> added_by_content;
  std::unordered_map<std::int64_t, std::size_t> added_by_id;
  std::unordered_map<std::int64_t, bool> special_ids;  // added tokens marked special + config's named ones
  Trie raw, normalized;
  bool clean_up_spaces = false;
  std::int64_t vocab_size = 0;

  // Splits `s` where the trie's tokens occur (leftmost, longest first), honouring single_word,
  // lstrip and rstrip, as the crate's AddedVocabulary.
  void split_added(const NString& s, const Trie& trie, std::vector<Segment>& out) const {
    if (trie.empty()) {
      out.push_back({s, -1});
      return;
    }
    std::size_t seg_start = 0, i = 0;
    const std::size_t n = s.size();
    while (i < n) {
      auto [tok, end] = trie.longest(s.s, i);
      if (tok < 0) {
        ++i;
        continue;
      }
      const AddedToken& a = added[static_cast<std::size_t>(tok)];
      if (a.single_word && ((i > 0 && is_word_char(s.s[i - 1])) || (end < n && is_word_char(s.s[end])))) {
        ++i;
        continue;
      }
      std::size_t start = i;
      if (a.lstrip) {
        while (start > seg_start && hf::is_rust_whitespace(s.s[start - 1])) --start;
      }
      if (a.rstrip) {
        while (end < n && hf::is_rust_whitespace(s.s[end])) ++end;
      }
      if (start > seg_start) out.push_back({s.slice(seg_start, start), -1});
      out.push_back({s.slice(start, end), tok});
      i = seg_start = end;
    }
    if (seg_start < n) out.push_back({s.slice(seg_start, n), -1});
  }

  hf::Piece encode_one(std::string_view text) const {
    hf::Piece p;
    std::vector<Segment> first, segs;
    split_added(hf::nstring_from_utf8(text), raw, first);
    for (Segment& s : first) {
      if (s.added >= 0) {
        segs.push_back(std::move(s));
        continue;
      }
      if (normalizer) normalizer->normalize(s.text);
      split_added(s.text, normalized, segs);
    }
    std::vector<NString> pieces;
    std::vector<hf::ModelToken> toks;
    for (const Segment& s : segs) {
      if (s.text.size() == 0) continue;
      if (s.added >= 0) {
        const AddedToken& a = added[static_cast<std::size_t>(s.added)];
        p.ids.push_back(a.id);
        p.offsets.emplace_back(s.text.align.front().first, s.text.align.back().second);
        // The matched text, with what lstrip / rstrip took (" <mask>"), as the crate reports it: the
        // ByteLevel / Roberta trim_offsets then leave that whitespace out of the offsets.
        p.tokens.push_back(hf::to_utf8(s.text.s));
        continue;
      }
      pieces.assign(1, s.text);
      if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
      for (const NString& piece : pieces) {
        toks.clear();
        model->tokenize(piece.s, toks);
        for (const hf::ModelToken& t : toks) {
          p.ids.push_back(t.id);
          p.offsets.emplace_back(piece.align[t.start].first, piece.align[t.end - 1].second);
          const std::string* name = model->id_to_token(t.id);
          p.tokens.push_back(name ? *name : std::string());
        }
      }
    }
    p.type_ids.assign(p.ids.size(), 0);
    p.special.assign(p.ids.size(), false);
    return p;
  }

  HfEncoding finish(hf::Piece a, hf::Piece* b, bool add_special) const {
    hf::Piece out;
    if (post_processor) {
      out = post_processor->process(std::move(a), b, add_special);
    } else {
      out = std::move(a);
      if (b) {
        out.ids.insert(out.ids.end(), b->ids.begin(), b->ids.end());
        out.offsets.insert(out.offsets.end(), b->offsets.begin(), b->offsets.end());
        out.type_ids.insert(out.type_ids.end(), b->ids.size(), 1);
        out.special.insert(out.special.end(), b->special.begin(), b->special.end());
      }
    }
    return {std::move(out.ids), std::move(out.offsets), std::move(out.type_ids), std::move(out.special)};
  }
};

namespace {

json parse_json(const std::string& text, const std::string& name) {
  check_json_nesting(text, name);
  try {
    json j = json::parse(text);
    if (!j.is_object()) throw InputError(name, "expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw InputError(name, "malformed JSON: " + clip_text(e.what()));
  }
}

// Older files leave the model's "type" out; the crate then tells the models apart by their keys.
json with_model_type(json m) {
  if (m.is_object() && !m.contains("type")) {
    if (m.contains("merges")) m["type"] = "BPE";
    else if (m.contains("max_input_chars_per_word")) m["type"] = "WordPiece";
    else if (m.contains("vocab") && m["vocab"].is_array()) m["type"] = "Unigram";
    else m["type"] = "WordLevel";
  }
  return m;
}

}  // namespace

HfTokenizer HfTokenizer::from_json_text(const std::string& text, const std::string& name, const std::string& config_text) {
  const json j = parse_json(text, name);
  auto impl = std::make_shared<Impl>();
  impl->file = name;
  const JsonPath root{name, ""};
  hf::BuildContext ctx;
  impl->model = hf::make_model(with_model_type(hf::get_required(j, root, "model")), root / "model", ctx);
  ctx.model = impl->model.get();
  auto stage = [&](const char* key) -> const json* {
    if (!j.contains(key) || j[key].is_null()) return nullptr;
    return &j[key];
  };
  if (const json* s = stage("normalizer")) impl->normalizer = hf::make_normalizer(*s, root / "normalizer", ctx);
  if (const json* s = stage("pre_tokenizer")) impl->pre_tokenizer = hf::make_pre_tokenizer(*s, root / "pre_tokenizer", ctx);
  if (const json* s = stage("post_processor")) impl->post_processor = hf::make_post_processor(*s, root / "post_processor", ctx);
  if (const json* s = stage("decoder")) impl->decoder = hf::make_decoder(*s, root / "decoder", ctx);
  impl->vocab_size = impl->model->vocab_size();

  if (const json* list = stage("added_tokens")) {
    if (!list->is_array()) hf::fail(root / "added_tokens", "expected a list");
    for (std::size_t i = 0; i < list->size(); ++i) {
      const json& t = (*list)[i];
      const JsonPath at = (root / "added_tokens")[i];
      AddedToken a;
      a.id = hf::get_int(t, at, "id", -1);
      if (a.id < 0) hf::fail(at / "id", "expected a non-negative id");
      if (a.id >= impl->model->vocab_size() + static_cast<std::int64_t>(list->size()) + (std::int64_t{1} << 20)) {
        hf::fail(at / "id", "id " + std::to_string(a.id) + " is far past the vocabulary");  // the id tables are dense
      }
      a.content = hf::get_string(t, at, "content", "");
      a.special = hf::get_bool(t, at, "special", false);
      a.lstrip = hf::get_bool(t, at, "lstrip", false);
      a.rstrip = hf::get_bool(t, at, "rstrip", false);
      a.single_word = hf::get_bool(t, at, "single_word", false);
      a.normalized = hf::get_bool(t, at, "normalized", !a.special);  // the crate's default
      NString m = hf::nstring_from_utf8(a.content);
      if (a.normalized && impl->normalizer) impl->normalizer->normalize(m);
      a.match = m.s;
      const int index = static_cast<int>(impl->added.size());
      (a.normalized ? impl->normalized : impl->raw).add(a.match, index);
      impl->added_by_content[a.content] = impl->added.size();
      impl->added_by_id[a.id] = impl->added.size();
      if (a.special) impl->special_ids[a.id] = true;
      impl->vocab_size = std::max(impl->vocab_size, a.id + 1);
      impl->added.push_back(std::move(a));
    }
  }

  if (!config_text.empty()) {
    const std::string cname = (fs::path(name).parent_path() / "tokenizer_config.json").string();
    const json c = parse_json(config_text, cname);
    const JsonPath croot{cname, ""};
    impl->clean_up_spaces = hf::get_bool(c, croot, "clean_up_tokenization_spaces", false);
    // transformers counts the named special tokens as special when decoding with skip_special_tokens.
    auto mark = [&](const json& v) {
      std::string content;
      if (v.is_string()) content = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
      if (auto it = impl->added_by_content.find(content); it != impl->added_by_content.end()) {
        impl->special_ids[impl->added[it->second].id] = true;
      }
    };
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
      if (c.contains(key)) mark(c[key]);
    }
    if (c.contains("additional_special_tokens") && c["additional_special_tokens"].is_array()) {
      for (const auto& v : c["additional_special_tokens"]) mark(v);
    }
  }
  HfTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  const std::string text = read_file(path);
  const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
  const std::string config = fs::exists(cfg) ? read_file(cfg.string()) : std::string();
  return from_json_text(text, path, config);
}

HfEncoding HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->finish(impl_->encode_one(text), nullptr, add_special_tokens);
}

HfEncoding HfTokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special_tokens) const {
  hf::Piece pb = impl_->encode_one(b);
  // Offsets of the second sequence count in its own text, as the fast tokenizers report them.
  return impl_->finish(impl_->encode_one(a), &pb, add_special_tokens);
}

std::string HfTokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (skip_special_tokens && m.special_ids.count(id)) continue;
    if (auto it = m.added_by_id.find(id); it != m.added_by_id.end()) {
      tokens.push_back(m.added[it->second].content);
    } else if (const std::string* t = m.model->id_to_token(id)) {
      tokens.push_back(*t);
    }
  }
  std::string out;
  if (m.decoder) {
    m.decoder->decode(tokens);
    for (const auto& t : tokens) out += t;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  }
  if (m.clean_up_spaces) out = hf::clean_up_tokenization(std::move(out));
  return out;
}

std::int64_t HfTokenizer::token_to_id(const std::string& token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return impl_->added[it->second].id;
  return impl_->model->token_to_id(token);
}

std::string HfTokenizer::id_to_token(std::int64_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) return impl_->added[it->second].content;
  const std::string* t = impl_->model->id_to_token(id);
  return t ? *t : std::string();
}

std::int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
bool HfTokenizer::is_special(std::int64_t id) const { return impl_->special_ids.count(id) != 0; }
const std::string& HfTokenizer::file() const { return impl_->file; }

}  // namespace evalrun
