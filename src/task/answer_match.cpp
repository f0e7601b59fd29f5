#include "task/answer_match.hpp"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "common/errors.hpp"
#include "common/utf8.hpp"

namespace evalrun {

std::string cut_at_stop_strings(std::string text, const std::vector<std::string>& until) {
  for (const auto& term : until) {
    if (term.empty()) continue;
    const auto at = text.find(term);
    if (at != std::string::npos) text.resize(at);
  }
  return text;
}

namespace {

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8_at(s, i);
    out.push_back(c.code_point);
    i += static_cast<std::size_t>(c.length);
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// str.strip() without arguments.
std::string python_strip(const std::string& s) {
  const std::u32string u = to_u32(s);
  std::size_t b = 0, e = u.size();
  while (b < e && is_python_space(u[b])) ++b;
  while (e > b && is_python_space(u[e - 1])) --e;
  return to_utf8(std::u32string_view(u).substr(b, e - b));
}

}  // namespace

struct PyRegex::Compiled {
  pcre2_code* code = nullptr;
  std::string pattern, where;
  int groups = 0;
  ~Compiled() { pcre2_code_free(code); }
};

PyRegex PyRegex::compile(const std::string& pattern, const std::string& where) {
  const std::u32string pat = to_u32(pattern);
  int err = 0;
  PCRE2_SIZE err_at = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP, &err, &err_at, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, 256);
    std::string m;
    for (PCRE2_UCHAR* p = msg; *p != 0; ++p) m.push_back(static_cast<char>(*p));
    throw InputError(where, "regular expression \"" + pattern + "\" does not compile (at character " +
                                std::to_string(err_at) + "): " + m);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto c = std::make_shared<Compiled>();
  c->code = code;
  c->pattern = pattern;
  c->where = where;
  std::uint32_t n = 0;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &n);
  c->groups = static_cast<int>(n);
  PyRegex r;
  r.re_ = std::move(c);
  return r;
}

int PyRegex::groups() const { return re_->groups; }
const std::string& PyRegex::pattern() const { return re_->pattern; }

void PyRegex::each_match(std::u32string_view subject,
                         const std::function<void(const std::size_t* ovector, int rc)>& on_match) const {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re_->code, nullptr);
  std::size_t pos = 0;
  bool after_empty = false;
  while (pos <= subject.size()) {
    // After an empty match, Python tries again at the same place for a non-empty one, then moves on
    // one character (pcre2demo's NOTEMPTY_ATSTART | ANCHORED retry).
    const std::uint32_t flags =
        (pos == 0 ? 0 : PCRE2_NO_UTF_CHECK) | (after_empty ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0);
    const int rc = pcre2_match(re_->code, s, subject.size(), pos, flags, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (!after_empty) break;
      after_empty = false;
      ++pos;
      continue;
    }
    if (rc < 0) {
      pcre2_match_data_free(md);
      throw InputError(re_->where, "regular expression \"" + re_->pattern + "\" exceeded PCRE2's matching limits (error " +
                                       std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    on_match(ov, rc);
    after_empty = ov[1] == ov[0];
    pos = ov[1];
  }
  pcre2_match_data_free(md);
}

std::vector<std::vector<std::string>> PyRegex::findall(std::string_view text) const {
  const std::u32string subject = to_u32(text);
  const std::u32string_view view(subject);
  std::vector<std::vector<std::string>> out;
  each_match(view, [&](const std::size_t* ov, int rc) {
    std::vector<std::string> match;
    if (re_->groups == 0) match.push_back(to_utf8(view.substr(ov[0], ov[1] - ov[0])));
    for (int g = 1; g <= re_->groups; ++g) {
      const std::size_t b = ov[2 * g], e = ov[2 * g + 1];
      match.push_back(g < rc && b != PCRE2_UNSET ? to_utf8(view.substr(b, e - b)) : "");
    }
    out.push_back(std::move(match));
  });
  return out;
}

std::string PyRegex::remove_all(std::string_view text) const {
  const std::u32string subject = to_u32(text);
  std::u32string kept;
  std::size_t copied = 0;
  each_match(subject, [&](const std::size_t* ov, int) {
    kept.append(subject, copied, ov[0] - copied);
    copied = ov[1];
  });
  kept.append(subject, copied, std::u32string::npos);
  return to_utf8(kept);
}

std::string extract_answer(std::string_view response, const PyRegex& regex, int group_select, const std::string& fallback) {
  const auto matches = regex.findall(response);
  const auto n = static_cast<long>(matches.size());
  const long i = group_select < 0 ? n + group_select : group_select;
  if (i < 0 || i >= n) return fallback;
  const auto& groups = matches[static_cast<std::size_t>(i)];
  const auto first = std::find_if(groups.begin(), groups.end(), [](const std::string& g) { return !g.empty(); });
  if (first == groups.end()) return groups.size() == 1 ? std::string() : fallback;  // one group: "" is its text
  return python_strip(*first);
}

namespace {

std::string python_lower(const std::string& s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());  // full case mapping with the final-sigma rule, as str.lower()
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string remove_ascii(const std::string& s, bool (*drop)(unsigned char)) {
  std::string out;
  for (char c : s) {
    if (!drop(static_cast<unsigned char>(c))) out.push_back(c);
  }
  return out;
}

bool is_ascii_punctuation(unsigned char c) {  // Python's string.punctuation
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}
bool is_ascii_digit(unsigned char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool exact_match(std::string prediction, std::string reference, const ExactMatchOptions& options) {
  for (const auto& re : options.regexes_to_ignore) {
    prediction = re.remove_all(prediction);
    reference = re.remove_all(reference);
  }
  if (options.ignore_case) {
    prediction = python_lower(prediction);
    reference = python_lower(reference);
  }
  if (options.ignore_punctuation) {
    prediction = remove_ascii(prediction, is_ascii_punctuation);
    reference = remove_ascii(reference, is_ascii_punctuation);
  }
  if (options.ignore_numbers) {
    prediction = remove_ascii(prediction, is_ascii_digit);
    reference = remove_ascii(reference, is_ascii_digit);
  }
  if (options.strip) {
    prediction = python_strip(prediction);
    reference = python_strip(reference);
  }
  return prediction == reference;
}

}  // namespace evalrun
