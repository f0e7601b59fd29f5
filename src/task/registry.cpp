#include "task/registry.hpp"

#include <algorithm>
#include <stdexcept>

#include "config/run_spec.hpp"

namespace evalrun {

bool TaskInfo::applies(std::string_view key) const { return std::find(keys.begin(), keys.end(), key) != keys.end(); }

const std::vector<TaskInfo>& task_registry() {
  static const std::vector<TaskInfo> rows = {
      {.kind = TaskKind::qa,
       .name = "qa",
       .role = ModelRole::encoder,
       .summary = "extractive question answering (SQuAD)",
       .keys = {"task.max_seq_length", "task.doc_stride", "task.n_best_size", "task.max_answer_length",
                "task.version_2_with_negative", "task.null_score_diff_threshold", "task.pad_to_max_length",
                "output.predictions_json", "quantization.attention"},
       .thresholds_section = "qa",
       .fixed_shape_option = "task.pad_to_max_length = true",
       .shapes_fixed = [](const RunSpec& s) { return s.task.pad_to_max_length; }},
      {.kind = TaskKind::mlm,
       .name = "mlm",
       .role = ModelRole::encoder,
       .summary = "masked-token prediction",
       .keys = {"task.max_seq_length", "task.top_k", "quantization.attention"},
       .thresholds_section = "mlm"},
      {.kind = TaskKind::generate,
       .name = "generate",
       .role = ModelRole::decoder,
       .summary = "greedy generation",
       .keys = {"quantization.lm_head", "task.prompt_set", "task.max_new_tokens", "task.max_prompt_length", "task.min_pad_length",
                "task.fixed_prompt_length", "task.no_early_termination", "validation.golden"},
       .thresholds_section = "generate",
       .logits_modes = {LogitsMode::full, LogitsMode::topk, LogitsMode::none, LogitsMode::logprobs16},
       .fixed_shape_option = "task.fixed_prompt_length",
       .shapes_fixed = [](const RunSpec& s) { return s.task.fixed_prompt_length > 0; }},
      {.kind = TaskKind::perplexity,
       .name = "perplexity",
       .role = ModelRole::decoder,
       .summary = "corpus perplexity",
       .keys = {"quantization.lm_head", "task.context_length", "task.stride"},
       .thresholds_section = "perplexity",
       .logits_modes = {LogitsMode::none, LogitsMode::full, LogitsMode::topk, LogitsMode::logprobs16}},
      {.kind = TaskKind::loglikelihood,
       .name = "loglikelihood",
       .role = ModelRole::decoder,
       .summary = "log-likelihood of continuations, or a loglikelihood task file (LAMBADA): perplexity / acc (lm-evaluation-harness)",
       .keys = {"quantization.lm_head", "task.task_file", "task.num_fewshot", "task.fewshot_seed", "output.lm_eval_json", "output.samples_jsonl"},
       .thresholds_section = "loglikelihood",
       .logits_modes = {LogitsMode::none},
       .task_file = TaskFileUse::optional},
      {.kind = TaskKind::multiple_choice,
       .name = "multiple_choice",
       .role = ModelRole::decoder,
       .summary = "multiple-choice benchmark of a task file: acc / acc_norm (lm-evaluation-harness)",
       .keys = {"quantization.lm_head", "task.task_file", "task.num_fewshot", "task.fewshot_seed", "task.share_context", "output.lm_eval_json",
                "output.samples_jsonl"},
       .thresholds_section = "multiple_choice",
       .logits_modes = {LogitsMode::none},
       .task_file = TaskFileUse::required},
      {.kind = TaskKind::generate_until,
       .name = "generate_until",
       .role = ModelRole::decoder,
       .summary = "generation of a task file scored against gold: exact match (lm-evaluation-harness)",
       .keys = {"quantization.lm_head", "task.task_file", "task.num_fewshot", "task.fewshot_seed", "output.lm_eval_json", "output.samples_jsonl"},
       .thresholds_section = "generate_until",
       .logits_modes = {LogitsMode::none},
       .task_file = TaskFileUse::required},
  };
  return rows;
}

const TaskInfo& task_info(TaskKind kind) {
  const auto& rows = task_registry();
  const auto i = static_cast<std::size_t>(kind);
  if (rows.size() != kTaskCount || i >= rows.size() || rows[i].kind != kind) {
    throw std::logic_error("task registry: no row (in TaskKind order) for task kind " + std::to_string(i));
  }
  return rows[i];
}

const TaskInfo* find_task(std::string_view name) {
  for (const auto& row : task_registry())
    if (name == row.name) return &row;
  return nullptr;
}

std::string task_names() {
  std::string out;
  for (const auto& row : task_registry()) out += std::string(out.empty() ? "" : ", ") + row.name;
  return out;
}

const char* to_string(TaskKind kind) { return task_info(kind).name; }

const char* to_string(ModelRole role) { return role == ModelRole::encoder ? "encoder" : "decoder"; }

}  // namespace evalrun
