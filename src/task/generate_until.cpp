#include "task/generate_until.hpp"

namespace evalrun {

GenerateUntilScoring generation_scoring(const TaskFile& task) {
  GenerateUntilScoring s;
  s.until = task.until;
  for (std::size_t i = 0; i < task.filters.size(); ++i) {
    const auto& f = task.filters[i];
    AnswerFilter a;
    a.name = f.name;
    if (!f.regex.empty()) a.regex = PyRegex::compile(f.regex, task.path + ": filter[" + std::to_string(i) + "].regex");
    a.group_select = f.group_select;
    a.fallback = f.fallback;
    s.filters.push_back(std::move(a));
  }
  if (s.filters.empty()) s.filters.push_back(AnswerFilter{});
  for (std::size_t i = 0; i < task.regexes_to_ignore.size(); ++i) {
    s.exact_match.regexes_to_ignore.push_back(
        PyRegex::compile(task.regexes_to_ignore[i], task.path + ": regexes_to_ignore[" + std::to_string(i) + "]"));
  }
  s.exact_match.ignore_case = task.ignore_case;
  s.exact_match.ignore_punctuation = task.ignore_punctuation;
  s.exact_match.ignore_numbers = task.ignore_numbers;
  s.exact_match.strip = task.strip;
  return s;
}

ScoredResponse score_response(const std::string& generated_text, const std::string& target,
                              const GenerateUntilScoring& scoring) {
  ScoredResponse s;
  s.response = cut_at_stop_strings(generated_text, scoring.until);
  for (const auto& f : scoring.filters) {
    std::string answer = f.regex ? extract_answer(s.response, *f.regex, f.group_select, f.fallback) : s.response;
    s.exact.push_back(exact_match(answer, target, scoring.exact_match));
    s.answers.push_back(std::move(answer));
  }
  return s;
}

}  // namespace evalrun
