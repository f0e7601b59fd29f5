// Shared pieces of the tokenizer.json pipeline: JSON reads, the aligned string, PCRE2 patterns,
// split behaviours, character classes and the registry look-up.
#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <unicode/uchar.h>

#include <algorithm>

#include "common/errors.hpp"
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {

void fail(const JsonPath& at, const std::string& what) { throw InputError(at.str(), what); }

const json& get_required(const json& j, const JsonPath& at, const char* key) {
  if (!j.is_object() || !j.contains(key)) fail(at / key, "missing");
  return j[key];
}

std::string get_string(const json& j, const JsonPath& at, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail(at / key, "expected a string, got " + j[key].dump());
  return j[key].get<std::string>();
}

bool get_bool(const json& j, const JsonPath& at, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail(at / key, "expected true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

std::int64_t get_int(const json& j, const JsonPath& at, const char* key, std::int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) fail(at / key, "expected an integer, got " + j[key].dump());
  return j[key].get<std::int64_t>();
}

NString NString::slice(std::size_t b, std::size_t e) const {
  NString out;
  out.s = s.substr(b, e - b);
  out.align.assign(align.begin() + static_cast<std::ptrdiff_t>(b), align.begin() + static_cast<std::ptrdiff_t>(e));
  return out;
}

void NString::append(const NString& o) {
  s += o.s;
  align.insert(align.end(), o.align.begin(), o.align.end());
}

NString nstring_from_utf8(std::string_view text, int first_index) {
  NString out;
  int k = first_index;
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8_at(text, i);
    out.s.push_back(c.code_point);
    out.align.emplace_back(k, k + 1);
    ++k;
    i += static_cast<std::size_t>(c.length);
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// ---- patterns ----
namespace {

// The patterns are Oniguruma's (the Rust crate compiles them with onig). PCRE2 reads that syntax, but
// two classes differ under UCP: Oniguruma's \s is Unicode White_Space, which has U+0085 (PCRE2's
// lacks it), and its \w is Letter | Mark | Number | Connector_Punctuation (PCRE2's has no marks and
// only "_" of Pc). This spells them out; everything else is passed through as written.
std::string oniguruma_classes(const std::string& re) {
  static const std::string space = "\\s\\x{85}", word = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[++i];
      if (n == 's' || n == 'w') {
        const std::string& inner = n == 's' ? space : word;
        out += in_class ? inner : "[" + inner + "]";
      } else if ((n == 'S' || n == 'W') && !in_class) {
        out += "[^" + (n == 'S' ? space : word) + "]";
      } else {
        out += c;  // any other escape (and \S, \W inside a class) as written
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];  // a leading ] is a member
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct Pattern::Compiled {
  pcre2_code* code = nullptr;
  std::string where, pattern;  // for the message when a match runs into PCRE2's limits
  ~Compiled() { pcre2_code_free(code); }
};

Pattern Pattern::regex(const std::string& re, const JsonPath& at) {
  // The files' patterns are written for Oniguruma (Rust `tokenizers`) and JavaScript; PCRE2 with UTF
  // and UCP reads the same syntax (\p{L}, (?i:...), look-around) with Unicode classes for \s \w \d.
  int err = 0;
  PCRE2_SIZE err_at = 0;
  std::u32string pat;
  const std::string translated = oniguruma_classes(re);
  for (std::size_t i = 0; i < translated.size();) {
    const Utf8Char c = decode_utf8_at(translated, i);
    pat.push_back(c.code_point);
    i += static_cast<std::size_t>(c.length);
  }
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_at, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, 256);
    std::string m;
    for (PCRE2_UCHAR* p = msg; *p != 0; ++p) m.push_back(static_cast<char>(*p));
    fail(at, "regular expression " + json(re).dump() + " does not compile (PCRE2, at " +
                 std::to_string(err_at) + "): " + m);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without a JIT, matching still works (interpreted)
  auto c = std::make_shared<Compiled>();
  c->code = code;
  c->where = at.str();
  c->pattern = re;
  Pattern p;
  p.re_ = std::move(c);
  return p;
}

Pattern Pattern::literal(std::u32string s) {
  Pattern p;
  p.literal_ = std::move(s);
  return p;
}

Pattern Pattern::from_json(const json& j, const JsonPath& at) {
  if (j.is_object() && j.size() == 1 && j.contains("Regex") && j["Regex"].is_string()) {
    return regex(j["Regex"].get<std::string>(), at / "Regex");
  }
  if (j.is_object() && j.size() == 1 && j.contains("String") && j["String"].is_string()) {
    return literal(nstring_from_utf8(j["String"].get<std::string>()).s);
  }
  fail(at, "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}, got " + j.dump());
}

std::vector<std::pair<std::size_t, std::size_t>> Pattern::find_all(std::u32string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (!re_) {
    if (literal_.empty()) return out;  // the crate finds nothing for an empty literal
    for (std::size_t p = text.find(literal_); p != std::u32string_view::npos; p = text.find(literal_, p + literal_.size())) {
      out.emplace_back(p, p + literal_.size());
    }
    return out;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    // PCRE2 checks the whole subject's UTF validity on every call unless told not to: once is enough
    // (checking again per match made long texts quadratic).
    const int rc = pcre2_match(re_->code, subject, text.size(), pos, pos == 0 ? 0 : PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // A match or depth limit (catastrophic backtracking): refuse rather than split differently.
      pcre2_match_data_free(md);
      throw InputError(re_->where, "regular expression " + json(re_->pattern).dump() +
                                       " exceeded PCRE2's matching limits (error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.emplace_back(ov[0], ov[1]);
    // After an empty match, the next search starts one character on (as Oniguruma's find_iter).
    pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
  }
  pcre2_match_data_free(md);
  return out;
}

// ---- behaviours ----
Behavior behavior_from_json(const json& j, const JsonPath& at) {
  static const std::pair<const char*, Behavior> names[] = {
      {"Removed", Behavior::Removed}, {"Isolated", Behavior::Isolated},
      {"MergedWithPrevious", Behavior::MergedWithPrevious}, {"MergedWithNext", Behavior::MergedWithNext},
      {"Contiguous", Behavior::Contiguous}};
  if (j.is_string()) {
    for (const auto& [n, b] : names) {
      if (j.get<std::string>() == n) return b;
    }
  }
  fail(at, j.dump() + " is not supported (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>> tile_matches(
    const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t n, bool invert) {
  std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>> out;
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) out.push_back({{prev, b}, invert});
    out.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < n) out.push_back({{prev, n}, invert});
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> apply_behavior(
    const std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>>& spans, Behavior b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  switch (b) {
    case Behavior::Isolated:
      for (const auto& [s, m] : spans) out.push_back(s);
      break;
    case Behavior::Removed:
      for (const auto& [s, m] : spans) {
        if (!m) out.push_back(s);
      }
      break;
    case Behavior::Contiguous: {
      // Runs of matches become one piece (a gap and a match never merge).
      bool prev_match = false;
      for (const auto& [s, m] : spans) {
        if (m && prev_match && !out.empty()) out.back().second = s.second;
        else out.push_back(s);
        prev_match = m;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& [s, m] : spans) {
        if (m && !prev_match && !out.empty()) out.back().second = s.second;
        else out.push_back(s);
        prev_match = m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->second && !prev_match && !out.empty()) out.back().first = it->first.first;
        else out.push_back(it->first);
        prev_match = it->second;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& s) { return s.first == s.second; }), out.end());
  return out;
}

std::vector<NString> split_chars(const NString& s, const std::function<bool(char32_t)>& pred, Behavior b) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (pred(s.s[i])) matches.emplace_back(i, i + 1);
  }
  std::vector<NString> out;
  for (const auto& [x, y] : apply_behavior(tile_matches(matches, s.size(), false), b)) out.push_back(s.slice(x, y));
  return out;
}

// ---- character classes ----
bool is_rust_whitespace(char32_t c) { return is_unicode_white_space(c); }

bool is_punctuation(char32_t c) {
  // BERT's rule: every non-alphanumeric printable ASCII character, plus Unicode P*.
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

bool is_numeric(char32_t c) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & (U_GC_ND_MASK | U_GC_NL_MASK | U_GC_NO_MASK)) != 0;
}

// ---- byte-level map (GPT-2's bytes_to_unicode) ----
namespace {
struct ByteMap {
  char32_t to_char[256];
  std::vector<int> to_byte;  // indexed by code point < 512
  ByteMap() : to_byte(512, -1) {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_char[b]] = b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

char32_t byte_to_char(std::uint8_t b) { return byte_map().to_char[b]; }
int char_to_byte(char32_t c) { return c < 512 ? byte_map().to_byte[c] : -1; }

// ---- registry look-up ----
namespace {
template <class T>
std::unique_ptr<T> make_from(const std::vector<Registration<T>>& table, const json& j, const JsonPath& at,
                             const BuildContext& ctx) {
  if (!j.is_object()) fail(at, "expected an object, got " + j.dump());
  const std::string type = get_string(j, at, "type", "");
  for (const auto& r : table) {
    if (type == r.type) return r.make(j, at, ctx);
  }
  std::string names;
  for (const auto& r : table) names += (names.empty() ? "" : ", ") + std::string(r.type);
  fail(at / "type", json(type).dump() + " is not supported (supported: " + names + ")");
}
}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const JsonPath& at, const BuildContext& ctx) {
  return make_from(normalizer_table(), j, at, ctx);
}
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const JsonPath& at, const BuildContext& ctx) {
  return make_from(pre_tokenizer_table(), j, at, ctx);
}
std::unique_ptr<Model> make_model(const json& j, const JsonPath& at, const BuildContext& ctx) {
  return make_from(model_table(), j, at, ctx);
}
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const JsonPath& at, const BuildContext& ctx) {
  return make_from(post_processor_table(), j, at, ctx);
}
std::unique_ptr<Decoder> make_decoder(const json& j, const JsonPath& at, const BuildContext& ctx) {
  return make_from(decoder_table(), j, at, ctx);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  std::size_t pos = 0;
  for (std::size_t f = s.find(from); f != std::string::npos; f = s.find(from, pos)) {
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [a, b] : rules) s = replace_all(std::move(s), a, b);
  return s;
}

}  // namespace evalrun::hf
