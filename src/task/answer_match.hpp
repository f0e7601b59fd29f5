// Scoring a generated answer against gold, as lm-evaluation-harness's generate_until tasks do (GSM8K):
//   1. the generation is cut at its stop strings (`until`; HFLM's post-processing),
//   2. a regex filter extracts the answer (lm_eval/filters/extraction.py RegexFilter),
//   3. exact match compares it with the target after the configured normalizations (the
//      `exact_match` metric, Hugging Face evaluate's exact_match).
// The regular expressions are Python `re` patterns on str (Unicode classes); PCRE2 reads that syntax.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

// HFLM's `for term in until: s = s.split(term)[0]`: each stop string in turn cuts what the previous
// ones left (an empty string cuts nothing).
std::string cut_at_stop_strings(std::string text, const std::vector<std::string>& until);

// A compiled Python-style regular expression (PCRE2, UTF + UCP, as Python 3's `re` on str).
class PyRegex {
 public:
  // InputError naming `where` (the task file and key) when the pattern does not compile.
  static PyRegex compile(const std::string& pattern, const std::string& where);

  // re.findall: every non-overlapping match left to right (an empty match right after a non-empty one
  // counts, as in Python 3.7+). Per match: the whole match when the pattern has no group, else each
  // group's text ("" for a group that did not take part).
  std::vector<std::vector<std::string>> findall(std::string_view text) const;
  // re.sub(pattern, "", text): every match of findall removed.
  std::string remove_all(std::string_view text) const;
  int groups() const;
  const std::string& pattern() const;

 private:
  struct Compiled;
  // Calls on_match(ovector, rc) for every match in the order re.finditer visits them.
  void each_match(std::u32string_view subject, const std::function<void(const std::size_t* ovector, int rc)>& on_match) const;
  std::shared_ptr<const Compiled> re_;
};

// RegexFilter: matches = re.findall(regex, response); the match at group_select (negative counts
// from the end, as Python's list index); of a match with several groups the first non-empty group;
// stripped (str.strip()). No match, a group_select outside the matches or a match whose groups are
// all empty gives `fallback` (lm-eval raises IndexError on the last two: a task error there, a
// fallback here).
std::string extract_answer(std::string_view response, const PyRegex& regex, int group_select,
                           const std::string& fallback = "[invalid]");

struct ExactMatchOptions {
  std::vector<PyRegex> regexes_to_ignore;  // removed from both sides first, in order
  bool ignore_case = false;                // str.lower() (full Unicode lower-casing)
  bool ignore_punctuation = false;         // ASCII string.punctuation removed
  bool ignore_numbers = false;             // ASCII digits removed
  bool strip = false;                      // str.strip() on both sides, after the others
};

// exact_match of one prediction against one reference after the normalizations above.
bool exact_match(std::string prediction, std::string reference, const ExactMatchOptions& options);

}  // namespace evalrun
