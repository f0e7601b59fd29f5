#include "task/mc_report.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/sha256.hpp"
#include "task/generate_until.hpp"

namespace evalrun {

using ojson = nlohmann::ordered_json;

McMetrics summarize_multiple_choice(const std::vector<McDecision>& decisions) {
  std::vector<double> acc, norm;
  for (const auto& d : decisions) {
    acc.push_back(d.acc ? 1.0 : 0.0);
    norm.push_back(d.acc_norm ? 1.0 : 0.0);
  }
  const MeanWithStderr a = mean_with_stderr(acc), n = mean_with_stderr(norm);
  return {decisions.size(), a.mean, a.standard_error, n.mean, n.standard_error};
}

namespace {

// lm-eval writes a stderr it cannot compute (n < 2) as "N/A".
ojson number_or_na(double v) { return std::isfinite(v) ? ojson(v) : ojson("N/A"); }

}  // namespace

std::string lm_eval_results_json(const McRunInfo& info, const McMetrics& m) {
  const std::string& t = info.task;
  ojson j;
  j["results"][t] = {{"alias", t},
                     {"acc,none", m.acc},
                     {"acc_stderr,none", number_or_na(m.acc_stderr)},
                     {"acc_norm,none", m.acc_norm},
                     {"acc_norm_stderr,none", number_or_na(m.acc_norm_stderr)}};
  j["group_subtasks"][t] = ojson::array();
  ojson metric_list = ojson::array();
  for (const char* name : {"acc", "acc_norm"})
    metric_list.push_back({{"metric", name}, {"aggregation", "mean"}, {"higher_is_better", true}});
  j["configs"][t] = {{"task", t},
                     {"task_file", info.task_file},
                     {"output_type", "multiple_choice"},
                     {"num_fewshot", info.num_fewshot},
                     {"fewshot_config", {{"sampler", "default"}, {"seed", info.fewshot_seed}}},
                     {"target_delimiter", info.target_delimiter},
                     {"fewshot_delimiter", info.fewshot_delimiter},
                     {"metric_list", metric_list}};
  j["versions"][t] = 1.0;
  j["n-shot"][t] = info.num_fewshot;
  j["higher_is_better"][t] = {{"acc", true}, {"acc_norm", true}};
  j["n-samples"][t] = {{"original", info.n_original}, {"effective", m.n_documents}};
  j["config"] = {{"model", "evalrun"},
                 {"model_args", "pretrained=" + info.model_path},
                 {"batch_size", info.batch_size},
                 {"limit", info.n_original == m.n_documents ? ojson(nullptr) : ojson(m.n_documents)},
                 {"bootstrap_iters", 0},
                 {"random_seed", nullptr},
                 {"fewshot_seed", info.fewshot_seed}};
  j["evalrun_version"] = info.evalrun_version;
  return j.dump(2);
}

std::string python_json_dump_indent2(const std::string& json_text, const std::string& where) {
  ojson doc;
  try {
    doc = ojson::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where, std::string("the document is not JSON: ") + e.what());
  }
  // nlohmann's indent-2 layout is Python's (", " / ": " separators, one item a line, "[]" and "{}"
  // for empty ones), and it writes non-ASCII text as UTF-8 as ensure_ascii=False does.
  return doc.dump(2);
}

std::string lm_eval_sample_line(const TaskDocument& doc, const McDocScores& scores, const McDecision& decision) {
  if (scores.choices.size() != doc.requests.size()) {
    throw InputError(doc.where, std::to_string(scores.choices.size()) + " scores for " +
                                    std::to_string(doc.requests.size()) + " requests");
  }
  ojson line;
  line["doc_id"] = doc.doc_id;
  line["doc"] = ojson::parse(python_json_dump_indent2(doc.doc_json, doc.where));
  line["target"] = doc.gold;
  ojson args = ojson::array(), resps = ojson::array(), filtered = ojson::array();
  for (std::size_t i = 0; i < doc.requests.size(); ++i) {
    args.push_back({doc.requests[i].context, doc.requests[i].continuation});
    const ojson pair = {scores.choices[i].loglikelihood, scores.choices[i].is_greedy};
    resps.push_back(ojson::array({pair}));
    filtered.push_back(pair);
  }
  line["arguments"] = args;
  line["resps"] = resps;
  line["filtered_resps"] = filtered;
  line["filter"] = "none";
  line["metrics"] = {"acc", "acc_norm"};
  line["doc_hash"] = sha256_hex(python_json_dump_indent2(doc.doc_json, doc.where));
  line["prompt_hash"] = sha256_hex(doc.requests.empty() ? std::string() : doc.requests.front().context);
  line["target_hash"] = sha256_hex(std::to_string(doc.gold));
  line["acc"] = decision.acc ? 1.0 : 0.0;
  line["acc_norm"] = decision.acc_norm ? 1.0 : 0.0;
  return line.dump();
}

double mcnemar_exact_p(std::size_t b, std::size_t c) {
  const std::size_t n = b + c, k = std::min(b, c);
  if (n == 0) return 1.0;
  // sum_{i <= k} C(n, i) / 2^n in logs (n may be thousands)
  double sum = 0.0;
  for (std::size_t i = 0; i <= k; ++i) {
    const double log_term = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                            std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0);
    sum += std::exp(log_term);
  }
  return std::min(1.0, 2.0 * sum);
}

McPairedComparison compare_multiple_choice(const std::vector<McDecision>& ref, const std::vector<McDecision>& cand,
                                           const std::vector<std::vector<double>>& ref_ll,
                                           const std::vector<std::vector<double>>& cand_ll, const std::string& where) {
  const std::size_t n = ref.size();
  if (cand.size() != n || ref_ll.size() != n || cand_ll.size() != n || n == 0) {
    throw InputError(where, "the runs score different documents (" + std::to_string(n) + " vs " +
                                std::to_string(cand.size()) + ")");
  }
  McPairedComparison c;
  c.n_documents = n;
  std::size_t same = 0, same_norm = 0, request = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (ref_ll[i].size() != cand_ll[i].size()) {
      throw InputError(where, "document " + std::to_string(i) + " has " + std::to_string(ref_ll[i].size()) +
                                  " choices in the reference and " + std::to_string(cand_ll[i].size()) +
                                  " in the candidate");
    }
    c.acc_ref_only += ref[i].acc && !cand[i].acc ? 1 : 0;
    c.acc_cand_only += !ref[i].acc && cand[i].acc ? 1 : 0;
    c.norm_ref_only += ref[i].acc_norm && !cand[i].acc_norm ? 1 : 0;
    c.norm_cand_only += !ref[i].acc_norm && cand[i].acc_norm ? 1 : 0;
    same += ref[i].pred == cand[i].pred ? 1 : 0;
    same_norm += ref[i].pred_norm == cand[i].pred_norm ? 1 : 0;
    for (std::size_t k = 0; k < ref_ll[i].size(); ++k, ++request) {
      const double d = std::fabs(ref_ll[i][k] - cand_ll[i][k]);
      if (d > c.loglik_max_abs_diff || std::isnan(d)) c.loglik_max_abs_diff = d, c.loglik_argmax_request = request;
    }
  }
  const auto dn = static_cast<double>(n);
  c.acc_delta = (static_cast<double>(c.acc_cand_only) - static_cast<double>(c.acc_ref_only)) / dn;
  c.acc_norm_delta = (static_cast<double>(c.norm_cand_only) - static_cast<double>(c.norm_ref_only)) / dn;
  c.acc_p = mcnemar_exact_p(c.acc_ref_only, c.acc_cand_only);
  c.acc_norm_p = mcnemar_exact_p(c.norm_ref_only, c.norm_cand_only);
  c.pred_agreement = static_cast<double>(same) / dn;
  c.pred_norm_agreement = static_cast<double>(same_norm) / dn;
  return c;
}

}  // namespace evalrun
