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

}  // namespace evalrun
