// The official SQuAD evaluation (evaluate-v1.1.py / evaluate-v2.0.py) and the prediction files that
// Hugging Face utils_qa writes (predictions.json, nbest_predictions.json, null_odds.json).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/squad.hpp"
#include "task/qa_postprocess.hpp"

namespace evalrun {

// SQuAD answer normalization: Python str.lower() (full Unicode), drop ASCII punctuation
// (string.punctuation), replace the words a/an/the (regex \b(a|an|the)\b, Unicode word characters) by a
// space, then split on Unicode whitespace and join with single spaces.
std::string normalize_squad_answer(std::string_view text);
// normalize_squad_answer(text) split on whitespace.
std::vector<std::string> squad_answer_tokens(std::string_view text);

// Per-pair scores of evaluate-v1.1.py: exact match (0/1) and token F1 (0 when no token in common, also
// when both sides are empty).
double squad_v1_exact(std::string_view prediction, std::string_view gold);
double squad_v1_f1(std::string_view prediction, std::string_view gold);
// evaluate-v2.0.py: like v1.1 except F1 is 1 when both sides normalize to no tokens (0 when only one does).
double squad_v2_exact(std::string_view prediction, std::string_view gold);
double squad_v2_f1(std::string_view prediction, std::string_view gold);

struct SquadScores {
  // Averages x 100, as the official scripts print them ("exact_match"/"f1" in v1.1, "exact"/"f1" in v2.0).
  double exact = 0;
  double f1 = 0;
  std::size_t total = 0;
  // Per question in example order, 0/1 and 0..1 (best over the gold answers).
  std::vector<double> exact_per_question;
  std::vector<double> f1_per_question;
  // v2.0 only: the same averages over the questions with answers (HasAns_) and without (NoAns_);
  // has_ans_total / no_ans_total are 0 (and the averages unset) when there are none, as the script omits them.
  bool version_2 = false;
  double has_ans_exact = 0, has_ans_f1 = 0;
  std::size_t has_ans_total = 0;
  double no_ans_exact = 0, no_ans_f1 = 0;
  std::size_t no_ans_total = 0;
};

// `predictions[i]` answers `examples[i]`. v1.1: max over the gold answers; InputError naming the question
// id when an example has no gold answer (the official script fails there too).
SquadScores evaluate_squad_v1(const std::vector<SquadExample>& examples, const std::vector<std::string>& predictions);
// v2.0 with the script's defaults (no na_prob file): a question without gold answers (or whose answers all
// normalize to "") scores 1 only for a prediction that normalizes to "".
SquadScores evaluate_squad_v2(const std::vector<SquadExample>& examples, const std::vector<std::string>& predictions);

// {"id": "text", ...} in the given order, formatted as utils_qa writes it (json.dumps indent 4, non-ASCII
// escaped, trailing newline). InputError naming the path if it cannot be written.
void write_predictions_json(const std::string& path, const std::vector<std::pair<std::string, std::string>>& predictions);
// nbest_predictions.json: {"id": [{"start_logit", "end_logit", "text", "probability"}, ...]} with numbers as
// Python's float repr. `ids[i]` names `predictions[i]`.
void write_nbest_predictions_json(const std::string& path, const std::vector<std::string>& ids,
                                  const std::vector<QaPrediction>& predictions);
// null_odds.json (SQuAD v2): {"id": null_score_diff}.
void write_null_odds_json(const std::string& path, const std::vector<std::string>& ids,
                          const std::vector<QaPrediction>& predictions);

// Python json.dumps pieces, exposed for tests: a string literal with ensure_ascii escaping, and repr(float).
std::string python_json_string(std::string_view utf8);
std::string python_float_repr(double value);

}  // namespace evalrun
