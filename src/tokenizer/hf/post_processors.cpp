// tokenizer.json post-processors: the special tokens around one sequence or a pair, with type ids.
#include <optional>
#include <unordered_map>

#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {
namespace {

void push_special(Piece& p, std::int64_t id, const std::string& token, std::int64_t type_id) {
  p.ids.push_back(id);
  p.offsets.emplace_back(0, 0);  // special tokens added here cover no text
  p.type_ids.push_back(type_id);
  p.special.push_back(true);
  p.tokens.push_back(token);
}

void append(Piece& out, const Piece& in, std::int64_t type_id) {
  out.ids.insert(out.ids.end(), in.ids.begin(), in.ids.end());
  out.offsets.insert(out.offsets.end(), in.offsets.begin(), in.offsets.end());
  out.type_ids.insert(out.type_ids.end(), in.ids.size(), type_id);
  out.special.insert(out.special.end(), in.special.begin(), in.special.end());
  out.tokens.insert(out.tokens.end(), in.tokens.begin(), in.tokens.end());
}

// ByteLevel's trim_offsets: a token's offsets leave out its leading and trailing spaces ("Ġ").
void trim_offsets(Piece& p, bool add_prefix_space) {
  for (std::size_t i = 0; i < p.ids.size(); ++i) {
    if (p.special[i]) continue;
    const std::u32string t = nstring_from_utf8(p.tokens[i]).s;
    auto space = [](char32_t c) { return c == byte_to_char(' ') || is_rust_whitespace(c); };
    std::size_t lead = 0, trail = 0;
    while (lead < t.size() && space(t[lead])) ++lead;
    while (trail < t.size() && space(t[t.size() - 1 - trail])) ++trail;
    auto& [b, e] = p.offsets[i];
    if (lead > 0) {
      const bool first = i == 0 || b == 0;
      if (first && add_prefix_space && lead == 1) lead = 0;  // the prefix space added to the text itself
      b = std::min(b + static_cast<int>(lead), e);
    }
    if (trail > 0 && e >= static_cast<int>(trail)) e = std::max(e - static_cast<int>(trail), b);
  }
}

class ByteLevel : public PostProcessor {
 public:
  ByteLevel(bool trim, bool prefix) : trim_(trim), prefix_(prefix) {}
  Piece process(Piece a, Piece* b, bool) const override {
    if (trim_) {
      trim_offsets(a, prefix_);
      if (b) trim_offsets(*b, prefix_);
    }
    Piece out;
    append(out, a, 0);
    if (b) append(out, *b, 1);
    return out;
  }

 private:
  bool trim_, prefix_;
};

struct SpecialTok {
  std::string token;
  std::int64_t id;
};

SpecialTok special_pair(const json& j, const JsonPath& at, const char* key, const BuildContext&) {
  const json& v = get_required(j, at, key);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer()) {
    fail(at / key, "expected [token, id], got " + v.dump());
  }
  return {v[0].get<std::string>(), v[1].get<std::int64_t>()};
}

// BERT: [CLS] A [SEP] (B [SEP]); RoBERTa: <s> A </s> (</s> B </s>), type ids all 0.
class ClsSep : public PostProcessor {
 public:
  ClsSep(SpecialTok cls, SpecialTok sep, bool roberta, bool trim, bool prefix)
      : cls_(std::move(cls)), sep_(std::move(sep)), roberta_(roberta), trim_(trim), prefix_(prefix) {}
  Piece process(Piece a, Piece* b, bool add) const override {
    if (roberta_ && trim_) {
      trim_offsets(a, prefix_);
      if (b) trim_offsets(*b, prefix_);
    }
    const std::int64_t tb = roberta_ ? 0 : 1;
    Piece out;
    if (add) push_special(out, cls_.id, cls_.token, 0);
    append(out, a, 0);
    if (add) push_special(out, sep_.id, sep_.token, 0);
    if (b) {
      if (add && roberta_) push_special(out, sep_.id, sep_.token, tb);
      append(out, *b, tb);
      if (add) push_special(out, sep_.id, sep_.token, tb);
    }
    return out;
  }

 private:
  SpecialTok cls_, sep_;
  bool roberta_, trim_, prefix_;
};

class Template : public PostProcessor {
 public:
  struct Item {
    bool special;
    std::string name;  // the special token's key, or "A" / "B"
    std::int64_t type_id;
  };
  struct Special {
    std::vector<std::int64_t> ids;
    std::vector<std::string> tokens;
  };
  Template(std::vector<Item> single, std::vector<Item> pair, std::unordered_map<std::string, Special> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {}
  Piece process(Piece a, Piece* b, bool add) const override {
    Piece out;
    for (const Item& it : b ? pair_ : single_) {
      if (it.special) {
        if (!add) continue;
        const Special& s = specials_.at(it.name);
        for (std::size_t k = 0; k < s.ids.size(); ++k) push_special(out, s.ids[k], s.tokens[k], it.type_id);
      } else if (it.name == "A") {
        append(out, a, it.type_id);
      } else if (b) {
        append(out, *b, it.type_id);
      }
    }
    return out;
  }

 private:
  std::vector<Item> single_, pair_;
  std::unordered_map<std::string, Special> specials_;
};

std::vector<Template::Item> template_items(const json& j, const JsonPath& at,
                                           const std::unordered_map<std::string, Template::Special>& specials) {
  if (!j.is_array()) fail(at, "expected a list of {\"SpecialToken\"} / {\"Sequence\"} items");
  std::vector<Template::Item> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const JsonPath here = at[i];
    const json& v = j[i];
    const bool special = v.is_object() && v.contains("SpecialToken");
    const bool seq = v.is_object() && v.contains("Sequence");
    if (!special && !seq) fail(here, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got " + v.dump());
    const json& body = special ? v["SpecialToken"] : v["Sequence"];
    const JsonPath bp = here / (special ? "SpecialToken" : "Sequence");
    Template::Item item{special, get_string(body, bp, "id", ""), get_int(body, bp, "type_id", 0)};
    if (special && !specials.count(item.name)) fail(bp / "id", json(item.name).dump() + " is not in special_tokens");
    if (!special && item.name != "A" && item.name != "B") fail(bp / "id", "expected \"A\" or \"B\"");
    out.push_back(item);
  }
  return out;
}

class Sequence : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  Piece process(Piece a, Piece* b, bool add) const override {
    // ByteLevel only trims offsets, of each sequence on its own (as the crate keeps the encodings
    // apart until the end); the first other processor joins the pair.
    Piece cur = std::move(a);
    std::optional<Piece> pair;
    if (b) pair = std::move(*b);
    for (const auto& p : parts_) {
      if (dynamic_cast<const ByteLevel*>(p.get()) != nullptr) {
        cur = p->process(std::move(cur), nullptr, add);
        if (pair) pair = p->process(std::move(*pair), nullptr, add);
      } else {
        cur = p->process(std::move(cur), pair ? &*pair : nullptr, add);
        pair.reset();
      }
    }
    if (pair) append(cur, *pair, 1);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

using Ptr = std::unique_ptr<PostProcessor>;

}  // namespace

const std::vector<Registration<PostProcessor>>& post_processor_table() {
  static const std::vector<Registration<PostProcessor>> table = {
      {"TemplateProcessing", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         std::unordered_map<std::string, Template::Special> specials;
         const json& st = get_required(j, at, "special_tokens");
         if (!st.is_object()) fail(at / "special_tokens", "expected an object");
         for (auto it = st.begin(); it != st.end(); ++it) {
           const JsonPath here = at / "special_tokens" / it.key();
           const json& ids = get_required(it.value(), here, "ids");
           const json& toks = get_required(it.value(), here, "tokens");
           if (!ids.is_array() || !toks.is_array() || ids.size() != toks.size()) fail(here, "expected lists \"ids\" and \"tokens\" of one length");
           Template::Special s;
           for (std::size_t k = 0; k < ids.size(); ++k) {
             if (!ids[k].is_number_integer() || !toks[k].is_string()) fail(here, "expected integer ids and string tokens");
             s.ids.push_back(ids[k].get<std::int64_t>());
             s.tokens.push_back(toks[k].get<std::string>());
           }
           specials[it.key()] = std::move(s);
         }
         auto single = template_items(get_required(j, at, "single"), at / "single", specials);
         auto pair = template_items(get_required(j, at, "pair"), at / "pair", specials);
         return std::make_unique<Template>(std::move(single), std::move(pair), std::move(specials));
       }},
      {"RobertaProcessing", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> Ptr {
         return std::make_unique<ClsSep>(special_pair(j, at, "cls", ctx), special_pair(j, at, "sep", ctx), true,
                                         get_bool(j, at, "trim_offsets", true), get_bool(j, at, "add_prefix_space", true));
       }},
      {"BertProcessing", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> Ptr {
         return std::make_unique<ClsSep>(special_pair(j, at, "cls", ctx), special_pair(j, at, "sep", ctx), false, false, false);
       }},
      {"ByteLevel", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<ByteLevel>(get_bool(j, at, "trim_offsets", true), get_bool(j, at, "add_prefix_space", true));
       }},
      {"Sequence", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> Ptr {
         return std::make_unique<Sequence>(sequence_parts<PostProcessor>(j, at, "processors", ctx, make_post_processor));
       }},
  };
  return table;
}

}  // namespace evalrun::hf
