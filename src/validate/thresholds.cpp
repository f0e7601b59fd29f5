#include "validate/thresholds.hpp"

#include <toml.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "common/errors.hpp"
#include "common/text.hpp"
#include "common/toml_file.hpp"
#include "task/registry.hpp"

namespace evalrun {

const std::vector<ThresholdSpec>& threshold_specs() {
  // Defaults: a bf16/fp16 run of the same checkpoint against fp32. Logit limits are absolute (logits
  // are O(1..10)); bf16's 8-bit mantissa typically moves them by a few hundredths (tiny random models
  // in bf16: max QA/MLM logit diff ~0.003, mean |log_prob diff| ~0.01, per-step top-k KL < 1e-3).
  static const std::vector<ThresholdSpec> specs = {
      {"generate", "token_mismatch_rate", 0.0, false,
       "share of generated tokens (over max(len ref, len cand) per prompt) from the first divergence on"},
      {"generate", "ce_per_token", 0.5, false,
       "per-token limit of the cross entropy over the reference's top-k in excess of the reference's own "
       "entropy (CE - H = KL; 0 when identical)"},
      {"generate", "softmax_diff_per_token", 0.05, false, "per-token limit of mean |p_ref - p_cand| over the top-k"},
      {"generate", "failure_rate", 0.01, false, "share of compared tokens over either per-token limit"},
      {"qa", "max_logit_diff", 0.05, false, "max |start/end logit difference| over every token of every feature"},
      {"qa", "mean_logit_diff", 0.01, false, "mean |start/end logit difference|"},
      {"qa", "em_delta", 0.5, false, "|exact match cand - ref| (points, 0..100)"},
      {"qa", "f1_delta", 0.5, false, "|F1 cand - ref| (points, 0..100)"},
      {"qa", "answer_agreement_min", 1.0, true, "share of questions with the identical predicted text"},
      {"mlm", "top1_agreement_min", 1.0, true, "share of masks with the same best token"},
      {"mlm", "max_logit_diff", 0.05, false, "max |mask logit difference| (both files logits = full)"},
      {"mlm", "mean_logit_diff", 0.01, false, "mean |mask logit difference| (both files logits = full)"},
      {"mlm", "accuracy_delta", 0.005, false, "|accuracy cand - ref| (0..1, when targets are given)"},
      {"perplexity", "ratio_max", 1.01, false,
       "perplexity cand / ref must lie in [1/ratio_max, ratio_max]"},
      {"perplexity", "logprob_diff_mean", 0.02, false, "mean per-token |log_prob cand - log_prob ref| (nats)"},
      {"perplexity", "logprob_diff_p99", 0.1, false, "99th percentile of per-token |log_prob diff| (nats)"},
      {"perplexity", "kl_mean", 0.005, false, "mean per-token KL(ref || cand) (nats; needs logits)"},
      {"perplexity", "kl_p99", 0.05, false, "99th percentile of per-token KL (nats; needs logits)"},
      {"perplexity", "top1_agreement_min", 0.95, true, "share of scored tokens with the same top-1 id (needs logits)"},
      {"loglikelihood", "loglik_diff_max", 0.05, false, "max per-request |log-likelihood cand - ref| (nats)"},
      {"loglikelihood", "greedy_agreement_min", 1.0, true, "share of requests with the same is_greedy"},
      {"multiple_choice", "acc_drop_max", 0.0, false,
       "acc and acc_norm: reference - candidate (0..1; a candidate that scores higher passes)"},
      {"multiple_choice", "decision_agreement_min", 1.0, true, "share of documents choosing the same answer (acc)"},
      {"multiple_choice", "loglik_diff_max", 0.05, false, "max per-request |log-likelihood cand - ref| (nats)"},
      {"generate_until", "token_mismatch_rate", 0.0, false,
       "share of generated tokens (over max(len ref, len cand) per document) from the first divergence on"},
      {"generate_until", "exact_match_drop_max", 0.0, false,
       "per answer filter: exact match ref - cand (0..1; a candidate that scores higher passes)"},
      {"generate_until", "answer_agreement_min", 1.0, true, "per answer filter: share of documents with the same extracted answer"},
  };
  return specs;
}

Thresholds::Thresholds() {
  for (const auto& s : threshold_specs()) values_[s.task + "." + s.key] = s.default_value;
}

double Thresholds::get(const std::string& task, const std::string& key) const {
  auto it = values_.find(task + "." + key);
  if (it == values_.end()) throw std::out_of_range("no threshold " + task + "." + key);
  return it->second;
}

void Thresholds::set(const std::string& task, const std::string& key, double value) {
  auto it = values_.find(task + "." + key);
  if (it == values_.end()) throw std::out_of_range("no threshold " + task + "." + key);
  it->second = value;
}

namespace {

std::string line_of(const std::string& path, const toml::value& v) {
  const auto loc = v.location();
  return loc.line() > 0 ? path + ":" + std::to_string(loc.line()) : path;
}

std::string keys_of(const std::string& task) {
  std::string out;
  for (const auto& s : threshold_specs())
    if (s.task == task) out += (out.empty() ? "" : ", ") + s.key;
  return out;
}

}  // namespace

Thresholds Thresholds::load(const std::string& path) {
  const toml::value root = read_toml_file(path, "thresholds file");
  Thresholds t;
  t.origin_ = path;
  std::vector<std::string> sections;  // one per task, from the task registry
  std::string section_list;
  for (const auto& task : task_registry()) {
    sections.push_back(task.thresholds_section);
    section_list += (section_list.empty() ? "" : ", ") + sections.back();
  }
  for (const auto& [section, table] : root.as_table()) {
    if (std::find(sections.begin(), sections.end(), section) == sections.end() || !table.is_table())
      throw InputError(line_of(path, table), "unknown section '" + section + "'; sections are " + section_list);
    for (const auto& [key, v] : table.as_table()) {
      const std::string where = line_of(path, v);
      if (t.values_.count(section + "." + key) == 0)
        throw InputError(where, "unknown key '" + section + "." + key + "'; [" + section + "] keys are " + keys_of(section));
      double value;
      if (v.is_floating()) value = v.as_floating();
      else if (v.is_integer()) value = static_cast<double>(v.as_integer());
      else throw InputError(where, section + "." + key + " must be a number");
      if (!(value >= 0)) throw InputError(where, section + "." + key + " must be >= 0");
      t.values_[section + "." + key] = value;
    }
  }
  return t;
}

std::string describe_thresholds() {
  std::ostringstream out;
  out << "| key | default | passes when | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& s : threshold_specs()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s.default_value);
    out << "| `" << s.task << "." << s.key << "` | " << buf << " | " << (s.is_minimum ? ">=" : "<=") << " | "
        << s.meaning << " |\n";
  }
  return out.str();
}

}  // namespace evalrun
