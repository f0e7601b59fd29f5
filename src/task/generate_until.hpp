// The generate_until output type of lm-evaluation-harness (HFLM.generate_until + the task's filters and
// exact_match metric), for a decoder: each document's prompt is generated greedily until a stop string,
// EOS or max_gen_toks; every filter extracts an answer from the response; exact match scores each answer
// against the document's target. The generation itself is task/generate.hpp's (stop_when for `until`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "task/answer_match.hpp"
#include "task/task_file.hpp"

namespace evalrun {

// One lm-eval filter pipeline of a generate_until task: a regex extraction, or none (the response as
// it is: lm-eval's "none" filter, take_first). Its name keys the metric: "exact_match,<name>".
struct AnswerFilter {
  std::string name = "none";
  std::optional<PyRegex> regex;  // RegexFilter; unset = the response unchanged
  int group_select = 0;
  std::string fallback = "[invalid]";
};

struct GenerateUntilScoring {
  std::vector<std::string> until;   // stop strings, the task file's order
  std::vector<AnswerFilter> filters;
  ExactMatchOptions exact_match;
};

// A generate_until task file's stop strings, filters (none: lm-eval's "none", the response as it is)
// and exact-match settings, its regular expressions compiled (InputError naming the task file and
// key, e.g. "tasks/gsm8k.toml: filter[1].regex").
GenerateUntilScoring generation_scoring(const TaskFile& task);

// One document's response, cut at the stop strings, and per filter its answer and whether it matches.
struct ScoredResponse {
  std::string response;              // decoded generation cut at `until`
  std::vector<std::string> answers;  // per filter
  std::vector<bool> exact;           // per filter
};
ScoredResponse score_response(const std::string& generated_text, const std::string& target,
                              const GenerateUntilScoring& scoring);

}  // namespace evalrun
