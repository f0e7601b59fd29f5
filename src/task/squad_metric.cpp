#include "task/squad_metric.hpp"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "common/errors.hpp"
#include "common/utf8.hpp"
#include "io/text_file.hpp"

namespace evalrun {
namespace {

// A word character for Python's str regexes (\w, \b): str.isalnum() or '_'. isalnum = letter (Lu, Ll,
// Lt, Lm, Lo) or any character with a numeric value (decimal, digit, numeric).
bool is_python_word(UChar32 c) {
  if (c == '_') return true;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      break;
  }
  return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

// string.punctuation
bool is_ascii_punctuation(UChar32 c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// Code points of UTF-8 text (ill-formed bytes become U+FFFD, as ICU converts them).
std::vector<UChar32> to_code_points(const icu::UnicodeString& s) {
  std::vector<UChar32> cps;
  cps.reserve(static_cast<std::size_t>(s.length()));
  for (int32_t i = 0; i < s.length(); i = s.moveIndex32(i, 1)) cps.push_back(s.char32At(i));
  return cps;
}

// Does `cps` hold `word` (ASCII) at position i?
bool matches_at(const std::vector<UChar32>& cps, std::size_t i, std::string_view word) {
  if (i + word.size() > cps.size()) return false;
  for (std::size_t k = 0; k < word.size(); ++k) {
    if (cps[i + k] != static_cast<UChar32>(word[k])) return false;
  }
  return true;
}

double max_over_gold(const std::vector<std::string>& golds, std::string_view prediction,
                     double (*score)(std::string_view, std::string_view)) {
  double best = 0;
  bool first = true;
  for (const std::string& g : golds) {
    const double s = score(prediction, g);
    if (first || s > best) best = s;
    first = false;
  }
  return best;
}

// One question's exact match and F1, each the best over its gold answers, appended to r's
// per-question lists.
struct QuestionScore {
  double em, f1;
};
QuestionScore score_question(const std::vector<std::string>& golds, std::string_view prediction,
                             double (*exact)(std::string_view, std::string_view),
                             double (*f1)(std::string_view, std::string_view), SquadScores& r) {
  const QuestionScore q{max_over_gold(golds, prediction, exact), max_over_gold(golds, prediction, f1)};
  r.exact_per_question.push_back(q.em);
  r.f1_per_question.push_back(q.f1);
  return q;
}

void check_sizes(const std::vector<SquadExample>& examples, const std::vector<std::string>& predictions) {
  if (examples.size() != predictions.size()) {
    throw std::invalid_argument("SQuAD evaluation: " + std::to_string(examples.size()) + " examples but " +
                                std::to_string(predictions.size()) + " predictions");
  }
}

// Token-overlap F1 of evaluate-v1.1.py / v2.0 (Counter intersection).
double overlap_f1(const std::vector<std::string>& pred, const std::vector<std::string>& gold) {
  std::map<std::string_view, long> counts;
  for (const std::string& t : gold) ++counts[t];
  long same = 0;
  for (const std::string& t : pred) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(pred.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(gold.size());
  return (2 * precision * recall) / (precision + recall);
}


}  // namespace

std::string normalize_squad_answer(std::string_view text) {
  // 1. lower(): full Unicode lower-casing with the final-sigma rule, as Python's str.lower().
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  u.toLower(icu::Locale::getRoot());
  std::vector<UChar32> cps = to_code_points(u);
  // 2. remove_punc
  std::erase_if(cps, is_ascii_punctuation);
  // 3. remove_articles: re.sub(r'\b(a|an|the)\b', ' ', s), scanning left to right over the original text.
  std::vector<UChar32> no_articles;
  no_articles.reserve(cps.size());
  const auto word_at = [&cps](std::size_t i) { return i < cps.size() && is_python_word(cps[i]); };
  for (std::size_t i = 0; i < cps.size();) {
    std::size_t len = 0;
    if (i == 0 || !word_at(i - 1)) {
      for (std::string_view w : {std::string_view("a"), std::string_view("an"), std::string_view("the")}) {
        if (matches_at(cps, i, w) && !word_at(i + w.size())) {
          len = w.size();
          break;
        }
      }
    }
    if (len > 0) {
      no_articles.push_back(' ');
      i += len;
    } else {
      no_articles.push_back(cps[i]);
      ++i;
    }
  }
  // 4. white_space_fix: ' '.join(s.split())
  std::string out;
  bool pending_space = false;
  for (UChar32 c32 : no_articles) {
    const auto c = static_cast<char32_t>(c32);  // ICU code points are never negative
    if (is_python_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    append_utf8(out, c);
  }
  return out;
}

std::vector<std::string> squad_answer_tokens(std::string_view text) {
  // normalize_squad_answer already joined the tokens with single ASCII spaces.
  const std::string norm = normalize_squad_answer(text);
  std::vector<std::string> tokens;
  std::size_t pos = 0;
  while (pos < norm.size()) {
    std::size_t end = norm.find(' ', pos);
    if (end == std::string::npos) end = norm.size();
    tokens.push_back(norm.substr(pos, end - pos));
    pos = end + 1;
  }
  return tokens;
}

double squad_v1_exact(std::string_view prediction, std::string_view gold) {
  return normalize_squad_answer(prediction) == normalize_squad_answer(gold) ? 1.0 : 0.0;
}

double squad_v1_f1(std::string_view prediction, std::string_view gold) {
  return overlap_f1(squad_answer_tokens(prediction), squad_answer_tokens(gold));
}

double squad_v2_exact(std::string_view prediction, std::string_view gold) { return squad_v1_exact(prediction, gold); }

double squad_v2_f1(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = squad_answer_tokens(prediction);
  const std::vector<std::string> g = squad_answer_tokens(gold);
  if (p.empty() || g.empty()) return p == g ? 1.0 : 0.0;
  return overlap_f1(p, g);
}

SquadScores evaluate_squad_v1(const std::vector<SquadExample>& examples, const std::vector<std::string>& predictions) {
  check_sizes(examples, predictions);
  SquadScores r;
  r.total = examples.size();
  double em_sum = 0, f1_sum = 0;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const SquadExample& ex = examples[i];
    if (ex.answers.empty()) {
      throw InputError("question '" + ex.id + "'", "has no gold answer; SQuAD v1.1 evaluation needs one (use v2)");
    }
    std::vector<std::string> golds;
    for (const SquadAnswer& a : ex.answers) golds.push_back(a.text);
    const auto [em, f1] = score_question(golds, predictions[i], squad_v1_exact, squad_v1_f1, r);
    em_sum += em;
    f1_sum += f1;
  }
  if (r.total > 0) {
    r.exact = 100.0 * em_sum / static_cast<double>(r.total);
    r.f1 = 100.0 * f1_sum / static_cast<double>(r.total);
  }
  return r;
}

SquadScores evaluate_squad_v2(const std::vector<SquadExample>& examples, const std::vector<std::string>& predictions) {
  check_sizes(examples, predictions);
  SquadScores r;
  r.version_2 = true;
  r.total = examples.size();
  double em_sum = 0, f1_sum = 0, has_em = 0, has_f1 = 0, no_em = 0, no_f1 = 0;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const SquadExample& ex = examples[i];
    std::vector<std::string> golds;
    for (const SquadAnswer& a : ex.answers) {
      if (!normalize_squad_answer(a.text).empty()) golds.push_back(a.text);
    }
    if (golds.empty()) golds.emplace_back();  // unanswerable: only "" is right
    const auto [em, f1] = score_question(golds, predictions[i], squad_v2_exact, squad_v2_f1, r);
    em_sum += em;
    f1_sum += f1;
    // The script splits by bool(qa['answers']), not by is_impossible.
    if (!ex.answers.empty()) {
      ++r.has_ans_total;
      has_em += em;
      has_f1 += f1;
    } else {
      ++r.no_ans_total;
      no_em += em;
      no_f1 += f1;
    }
  }
  const auto avg = [](double sum, std::size_t n) { return n == 0 ? 0.0 : 100.0 * sum / static_cast<double>(n); };
  r.exact = avg(em_sum, r.total);
  r.f1 = avg(f1_sum, r.total);
  r.has_ans_exact = avg(has_em, r.has_ans_total);
  r.has_ans_f1 = avg(has_f1, r.has_ans_total);
  r.no_ans_exact = avg(no_em, r.no_ans_total);
  r.no_ans_f1 = avg(no_f1, r.no_ans_total);
  return r;
}

std::string python_json_string(std::string_view utf8) {
  std::string out = "\"";
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  char buf[8];
  // UTF-16 units are exactly what ensure_ascii writes (non-BMP characters as surrogate pairs).
  for (int32_t i = 0; i < u.length(); ++i) {
    const char16_t c = u.charAt(i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c > 0x7E) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string python_float_repr(double value) {
  // json.dumps spells the non-finite values this way.
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits (the same digits repr() picks), then Python's layout: fixed notation
  // for decimal exponents -5 < e < 16, else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const std::size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char ch : mant) {
    if (ch != '.') digits.push_back(ch);
  }
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + m + eb;
  }
  const int point = exp + 1;  // digits before the decimal point
  std::string out;
  if (point <= 0) {
    out = "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
  } else if (static_cast<std::size_t>(point) >= digits.size()) {
    out = digits + std::string(static_cast<std::size_t>(point) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<std::size_t>(point)) + "." + digits.substr(static_cast<std::size_t>(point));
  }
  return sign + out;
}

namespace {

// A JSON object as Python's json.dump(obj, f, indent=4) writes one: "{}" when empty, else one
// `"key": value` line per entry at four spaces. Entry i is (keys[i], value(i)), value already JSON text.
template <class Value>
std::string python_json_object(const std::vector<std::string>& keys, const Value& value) {
  if (keys.empty()) return "{}";
  std::string out = "{\n";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    out += "    " + python_json_string(keys[i]) + ": " + value(i);
    out += i + 1 < keys.size() ? ",\n" : "\n";
  }
  return out + "}";
}

void check_sizes(const std::vector<std::string>& ids, const std::vector<QaPrediction>& predictions, const char* who) {
  if (ids.size() != predictions.size()) throw std::invalid_argument(std::string(who) + ": ids and predictions differ in size");
}

}  // namespace

void write_predictions_json(const std::string& path, const std::vector<std::pair<std::string, std::string>>& predictions) {
  std::vector<std::string> keys;
  for (const auto& p : predictions) keys.push_back(p.first);
  const std::string out =
      python_json_object(keys, [&](std::size_t i) { return python_json_string(predictions[i].second); });
  write_text_file(path, out + "\n", "the predictions");
}

void write_nbest_predictions_json(const std::string& path, const std::vector<std::string>& ids,
                                  const std::vector<QaPrediction>& predictions) {
  check_sizes(ids, predictions, "write_nbest_predictions_json");
  const auto num = [](float v) { return python_float_repr(static_cast<double>(v)); };
  const std::string out = python_json_object(ids, [&](std::size_t i) {
    const auto& nbest = predictions[i].nbest;
    if (nbest.empty()) return std::string("[]");
    std::string list = "[\n";
    for (std::size_t k = 0; k < nbest.size(); ++k) {
      const QaCandidate& c = nbest[k];
      const std::string in = "            ";
      const std::string text = in + "\"text\": " + python_json_string(c.text);
      const std::string sl = in + "\"start_logit\": " + num(c.start_logit);
      const std::string el = in + "\"end_logit\": " + num(c.end_logit);
      const std::string pr = in + "\"probability\": " + num(c.probability);
      list += "        {\n";
      // Key order follows how utils_qa built the dict (the fallback is created with "text" first).
      if (c.kind == QaCandidate::Kind::empty_fallback) {
        list += text + ",\n" + sl + ",\n" + el + ",\n" + pr + "\n";
      } else {
        list += sl + ",\n" + el + ",\n" + text + ",\n" + pr + "\n";
      }
      list += k + 1 < nbest.size() ? "        },\n" : "        }\n";
    }
    return list + "    ]";
  });
  write_text_file(path, out + "\n", "the n-best predictions");
}

void write_null_odds_json(const std::string& path, const std::vector<std::string>& ids,
                          const std::vector<QaPrediction>& predictions) {
  check_sizes(ids, predictions, "write_null_odds_json");
  const std::string out = python_json_object(
      ids, [&](std::size_t i) { return python_float_repr(static_cast<double>(predictions[i].null_score_diff)); });
  write_text_file(path, out + "\n", "the null odds");
}

}  // namespace evalrun
