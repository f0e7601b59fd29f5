// Start/end logits -> answer text, as Hugging Face utils_qa.postprocess_qa_predictions (run_qa.py):
// n-best spans over all windows of an example, the optional SQuAD v2 null answer, softmax probabilities.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/squad.hpp"
#include "task/qa_features.hpp"

namespace evalrun {

struct QaPostprocessOptions {
  int n_best_size = 20;
  int max_answer_length = 30;
  bool version_2_with_negative = false;
  float null_score_diff_threshold = 0.0F;
};

struct QaCandidate {
  std::string text;   // context[char_start:char_end] (code points); "" for the null answer
  float score = 0;    // start_logit + end_logit (float32, as numpy adds them)
  float start_logit = 0;
  float end_logit = 0;
  float probability = 0;  // softmax over the kept candidates' scores
  int char_start = 0;     // code points in the context
  int char_end = 0;
  int feature = -1;  // QaFeatureOutput::feature_index it came from (-1: the "empty" fallback)
  int token_start = -1;  // token positions inside that feature (0, 0 for the null answer)
  int token_end = -1;
  // How utils_qa builds it; decides the key order of nbest_predictions.json entries.
  enum class Kind { span, null_answer, empty_fallback } kind = Kind::span;
};

struct QaPrediction {
  std::string text;                // the prediction ("" = no answer, SQuAD v2 only)
  std::vector<QaCandidate> nbest;  // best first; what nbest_predictions.json lists
  // SQuAD v2 only: null score - best non-null start logit - best non-null end logit (null_odds.json).
  float null_score_diff = 0;
};

// The model output for one feature of an example.
struct QaFeatureOutput {
  const QaFeature* feature = nullptr;  // its offsets map tokens to context characters
  int feature_index = 0;               // reported in QaCandidate::feature (e.g. the global feature number)
  std::span<const float> start_logits;  // at least one value; positions past the feature's
  std::span<const float> end_logits;    // offsets (batch padding) are never chosen
};

// One example. `features` in window order (their order decides ties, as in utils_qa). The top
// n_best_size start and end positions of each feature are taken by value, ties broken towards the
// higher position (the reverse of a stable ascending argsort; numpy's quicksort argsort leaves ties
// unspecified); the pooled candidates are sorted by score with a stable sort, as Python's sorted().
QaPrediction postprocess_qa_example(std::string_view context, const std::vector<QaFeatureOutput>& features,
                                    const QaPostprocessOptions& options);

// All examples: `start_logits[i]` / `end_logits[i]` belong to `features[i]`; QaCandidate::feature is the
// index into `features`. One prediction per example, in example order.
std::vector<QaPrediction> postprocess_qa_predictions(const std::vector<SquadExample>& examples,
                                                     const std::vector<QaFeature>& features,
                                                     const std::vector<std::vector<float>>& start_logits,
                                                     const std::vector<std::vector<float>>& end_logits,
                                                     const QaPostprocessOptions& options);

}  // namespace evalrun
