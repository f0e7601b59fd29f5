#include "task/mc_report.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/sha256.hpp"
#include "task/lm_eval_stats.hpp"

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

std::string lm_eval_results_json(const McRunInfo& info, const std::string& output_type, std::size_t n_documents,
                                 const std::vector<LmEvalMetric>& metrics) {
  const std::string& t = info.task;
  ojson j;
  ojson& results = j["results"][t];
  results["alias"] = t;
  ojson metric_list = ojson::array(), higher = ojson::object();
  for (const auto& m : metrics) {
    results[m.name + "," + m.filter] = m.value;
    results[m.name + "_stderr," + m.filter] = number_or_na(m.standard_error);
    if (!higher.contains(m.name)) {
      metric_list.push_back({{"metric", m.name}, {"aggregation", m.aggregation}, {"higher_is_better", m.higher_is_better}});
      higher[m.name] = m.higher_is_better;
    }
  }
  j["group_subtasks"][t] = ojson::array();
  j["configs"][t] = {{"task", t},
                     {"task_file", info.task_file},
                     {"output_type", output_type},
                     {"num_fewshot", info.num_fewshot},
                     {"fewshot_config", {{"sampler", "default"}, {"seed", info.fewshot_seed}}},
                     {"target_delimiter", info.target_delimiter},
                     {"fewshot_delimiter", info.fewshot_delimiter},
                     {"metric_list", metric_list}};
  j["versions"][t] = 1.0;
  j["n-shot"][t] = info.num_fewshot;
  j["higher_is_better"][t] = higher;
  j["n-samples"][t] = {{"original", info.n_original}, {"effective", n_documents}};
  j["config"] = {{"model", "evalrun"},
                 {"model_args", "pretrained=" + info.model_path},
                 {"batch_size", info.batch_size},
                 {"limit", info.n_original == n_documents ? ojson(nullptr) : ojson(n_documents)},
                 {"bootstrap_iters", info.bootstrap_iters},
                 {"random_seed", nullptr},
                 {"fewshot_seed", info.fewshot_seed}};
  j["evalrun_version"] = info.evalrun_version;
  return j.dump(2);
}

std::string lm_eval_results_json(const McRunInfo& info, const McMetrics& m) {
  return lm_eval_results_json(info, "multiple_choice", m.n_documents,
                              {{"acc", "none", m.acc, m.acc_stderr}, {"acc_norm", "none", m.acc_norm, m.acc_norm_stderr}});
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

std::string lm_eval_loglikelihood_sample_line(const TaskDocument& doc, double loglikelihood, bool is_greedy) {
  if (doc.requests.size() != 1) throw InputError(doc.where, "a loglikelihood document has one request");
  const TaskRequestText& q = doc.requests.front();
  ojson line;
  line["doc_id"] = doc.doc_id;
  const std::string dumped = python_json_dump_indent2(doc.doc_json, doc.where);
  line["doc"] = ojson::parse(dumped);
  line["target"] = q.continuation;
  line["arguments"] = ojson::array({ojson::array({q.context, q.continuation})});
  const ojson pair = {loglikelihood, is_greedy};
  line["resps"] = ojson::array({ojson::array({pair})});
  line["filtered_resps"] = ojson::array({pair});
  line["filter"] = "none";
  line["metrics"] = {"perplexity", "acc"};
  line["doc_hash"] = sha256_hex(dumped);
  line["prompt_hash"] = sha256_hex(q.context);
  line["target_hash"] = sha256_hex(q.continuation);
  line["perplexity"] = loglikelihood;
  line["acc"] = is_greedy ? 1 : 0;
  return line.dump();
}

std::string lm_eval_generation_sample_line(const TaskDocument& doc, const std::vector<std::string>& until,
                                           int max_gen_toks, const std::string& response, const std::string& filter,
                                           const std::string& answer, bool exact) {
  ojson line;
  line["doc_id"] = doc.doc_id;
  const std::string dumped = python_json_dump_indent2(doc.doc_json, doc.where);
  line["doc"] = ojson::parse(dumped);
  line["target"] = doc.target;
  const std::string context = doc.requests.empty() ? std::string() : doc.requests.front().context;
  line["arguments"] = ojson::array({ojson::array({context, {{"until", until}, {"max_gen_toks", max_gen_toks}}})});
  line["resps"] = ojson::array({ojson::array({response})});
  line["filtered_resps"] = ojson::array({answer});
  line["filter"] = filter;
  line["metrics"] = {"exact_match"};
  line["doc_hash"] = sha256_hex(dumped);
  line["prompt_hash"] = sha256_hex(context);
  line["target_hash"] = sha256_hex(doc.target);
  line["exact_match"] = exact ? 1.0 : 0.0;
  return line.dump();
}

}  // namespace evalrun
