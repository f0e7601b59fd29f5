// What a multiple_choice run reports (task/multiple_choice.hpp): the aggregated metrics and lm-eval's
// results JSON and samples JSONL layouts (lm_eval/evaluator.py, loggers/evaluation_tracker.py), so
// tools that read lm-eval output read evalrun's. (Comparing two runs: validate/paired.hpp.)
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
  std::size_t bootstrap_iters = 0;  // config "bootstrap_iters": the resamples behind bootstrap stderrs
  std::string evalrun_version;
};

// One aggregated metric of lm-eval's results: "<name>,<filter>" and "<name>_stderr,<filter>".
struct LmEvalMetric {
  std::string name;             // "acc", "exact_match", "perplexity"
  std::string filter = "none";  // the filter pipeline it was computed after
  double value = 0.0, standard_error = 0.0;
  std::string aggregation = "mean";  // metric_list's aggregation ("perplexity" for LAMBADA's)
  bool higher_is_better = true;
};

// {"results": {task: {"alias", "<metric>,<filter>", "<metric>_stderr,<filter>", ...}}, "group_subtasks",
//  "configs" (output_type, metric_list), "versions", "n-shot", "higher_is_better", "n-samples", "config",
//  ...} as one JSON text (indent 2); n_documents is the effective sample count.
std::string lm_eval_results_json(const McRunInfo& info, const std::string& output_type, std::size_t n_documents,
                                 const std::vector<LmEvalMetric>& metrics);
// multiple_choice's: acc and acc_norm under the filter "none".
std::string lm_eval_results_json(const McRunInfo& info, const McMetrics& metrics);

// One samples JSONL line (no newline) for a document: doc_id, doc, target (the gold index), arguments
// [[context, continuation], ...], resps [[[ll, is_greedy]], ...], filtered_resps [[ll, is_greedy], ...],
// filter "none", metrics, doc_hash / prompt_hash / target_hash (sha256 hex as lm-eval's hash_string:
// of json.dumps(doc, indent=2, ensure_ascii=False), of the first request's context, of str(target)),
// acc, acc_norm. InputError naming doc.where for a doc_json that is not JSON.
std::string lm_eval_sample_line(const TaskDocument& doc, const McDocScores& scores, const McDecision& decision);

// generate_until's samples line for one document and one filter, as lm-eval writes one per filter:
// doc_id, doc, target (the target text), arguments [[context, {"until", "max_gen_toks"}]], resps
// [[response]], filtered_resps [answer], filter, metrics ["exact_match"], the three hashes, exact_match.
std::string lm_eval_generation_sample_line(const TaskDocument& doc, const std::vector<std::string>& until,
                                           int max_gen_toks, const std::string& response, const std::string& filter,
                                           const std::string& answer, bool exact);

// A loglikelihood task's (LAMBADA's) samples line: doc_id, doc, target (the continuation text),
// arguments [[context, continuation]], resps [[[ll, is_greedy]]], filtered_resps [[ll, is_greedy]],
// filter "none", metrics ["perplexity", "acc"], the three hashes, perplexity (the log-likelihood, as
// lm-eval's per-document value before its aggregation) and acc (0 or 1).
std::string lm_eval_loglikelihood_sample_line(const TaskDocument& doc, double loglikelihood, bool is_greedy);

// Python json.dumps(value, indent=2, ensure_ascii=False) of a JSON text, keys in their order.
std::string python_json_dump_indent2(const std::string& json_text, const std::string& where);

}  // namespace evalrun
