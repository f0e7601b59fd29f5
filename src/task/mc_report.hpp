// What a multiple_choice run reports (task/multiple_choice.hpp): the aggregated metrics, lm-eval's
// results JSON and samples JSONL layouts (lm_eval/evaluator.py, loggers/evaluation_tracker.py), so
// tools that read lm-eval output read evalrun's, and the paired test `compare` uses on two runs'
// decisions over the same documents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "task/multiple_choice.hpp"
#include "task/task_document.hpp"

namespace evalrun {

// acc and acc_norm as lm-eval aggregates them: mean with mean_stderr (sample stddev / sqrt(n); NaN
// for n < 2, which the results JSON writes as "N/A" as lm-eval does).
struct McMetrics {
  std::size_t n_documents = 0;
  double acc = 0.0, acc_stderr = 0.0, acc_norm = 0.0, acc_norm_stderr = 0.0;
};
McMetrics summarize_multiple_choice(const std::vector<McDecision>& decisions);

// The run facts lm-eval's results JSON holds besides the metrics.
struct McRunInfo {
  std::string task;        // the task file's name (results key, alias)
  std::string task_file;   // its path
  int num_fewshot = 0;
  std::uint64_t fewshot_seed = 1234;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n";
  std::size_t n_original = 0;  // documents in the data set (n-samples "original")
  std::string model_path;
  int batch_size = 1;
  std::string evalrun_version;
};

// {"results": {task: {"alias", "acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none"}},
//  "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "config", ...}
// as one JSON text (indent 2).
std::string lm_eval_results_json(const McRunInfo& info, const McMetrics& metrics);

// One samples JSONL line (no newline) for a document: doc_id, doc, target (the gold index), arguments
// [[context, continuation], ...], resps [[[ll, is_greedy]], ...], filtered_resps [[ll, is_greedy], ...],
// filter "none", metrics, doc_hash / prompt_hash / target_hash (sha256 hex as lm-eval's hash_string:
// of json.dumps(doc, indent=2, ensure_ascii=False), of the first request's context, of str(target)),
// acc, acc_norm. InputError naming doc.where for a doc_json that is not JSON.
std::string lm_eval_sample_line(const TaskDocument& doc, const McDocScores& scores, const McDecision& decision);

// Python json.dumps(value, indent=2, ensure_ascii=False) of a JSON text, keys in their order.
std::string python_json_dump_indent2(const std::string& json_text, const std::string& where);

// McNemar's exact two-sided test on paired decisions: b documents right in the reference only, c in the
// candidate only; p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2). 1 when b + c = 0.
double mcnemar_exact_p(std::size_t b, std::size_t c);

// Two runs of one task over the same documents (reference, candidate), what `compare` reports:
// accuracy deltas (candidate - reference) with McNemar's exact p over the paired decisions, the share
// of documents whose chosen answer (pred, pred_norm) is the same, and the largest per-request
// |log-likelihood difference|.
struct McPairedComparison {
  std::size_t n_documents = 0;
  double acc_delta = 0.0, acc_norm_delta = 0.0;
  std::size_t acc_ref_only = 0, acc_cand_only = 0;          // McNemar's b and c for acc
  std::size_t norm_ref_only = 0, norm_cand_only = 0;        // ... for acc_norm
  double acc_p = 1.0, acc_norm_p = 1.0;
  double pred_agreement = 1.0, pred_norm_agreement = 1.0;   // shares of documents
  double loglik_max_abs_diff = 0.0;
  std::size_t loglik_argmax_request = 0;                    // flat request index of that maximum
};
// InputError naming `where` when the runs differ in documents or choices per document.
McPairedComparison compare_multiple_choice(const std::vector<McDecision>& ref, const std::vector<McDecision>& cand,
                                           const std::vector<std::vector<double>>& ref_ll,
                                           const std::vector<std::vector<double>>& cand_ll, const std::string& where);

}  // namespace evalrun
