// The task registry: one row per task kind, the one place that says what a task name means. Every
// "which task is this" question (config keys that apply, encoder or decoder, the thresholds section,
// device notes) is answered from the row; the flow that runs a task (app/flows/flows.cpp) and the
// function that compares two result files (validate/compare.cpp) sit in tables of their own
// libraries, keyed by the same TaskKind and checked complete at compile time.
//
// Plain data, no dependencies beyond the standard library: config, device, validate and app all use it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

struct RunSpec;

// In registry row order. Adding a task: a value here, kTaskCount, a row in registry.cpp (see
// docs/architecture.md "Tasks" for the other files).
enum class TaskKind { qa, mlm, generate, perplexity, loglikelihood, multiple_choice, generate_until };
inline constexpr std::size_t kTaskCount = 7;

// The kind of model a task runs: an encoder with a token-level head, or a causal LM.
enum class ModelRole { encoder, decoder };

// Whether a task's documents come through a benchmark task file (task.task_file, task/task_file.hpp):
// never; optionally (loglikelihood: a task file, e.g. LAMBADA's, or a data set of raw requests); always
// (the task file is required and task.dataset optional, the task file naming its own).
enum class TaskFileUse { none, optional, required };

// output.logits: what a run stores of its logits rows (none, the top-k, every value, or the
// log-probabilities quantized to 16 bits: io/logprobs16.hpp). Rows list which a task stores.
enum class LogitsMode { none, topk, full, logprobs16 };

struct TaskInfo {
  TaskKind kind;
  const char* name;     // task.kind value; the result file's root attribute "task"
  ModelRole role;
  const char* summary;  // one phrase, for `evalrun help-config`
  // Config keys ("section.key") that apply to some tasks only, and do to this one. A key no row names
  // applies to every task (config.cpp checks that every per-task key is named by some row).
  std::vector<std::string> keys;
  const char* thresholds_section;  // [section] of an `evalrun compare` thresholds file
  // The output.logits values this task stores; the first is the default, the others are refused.
  std::vector<LogitsMode> logits_modes = {LogitsMode::full, LogitsMode::topk, LogitsMode::none};
  // aiu.compile_dynamic = "static" compiles every input shape once: the option that keeps this task's
  // shapes few ("" = none: its shapes are few anyway or cannot be fixed), and whether the run sets it.
  const char* fixed_shape_option = "";
  bool (*shapes_fixed)(const RunSpec&) = nullptr;
  TaskFileUse task_file = TaskFileUse::none;

  bool applies(std::string_view key) const;  // `key` is in `keys`
};

const std::vector<TaskInfo>& task_registry();  // in TaskKind order
const TaskInfo& task_info(TaskKind kind);
const TaskInfo* find_task(std::string_view name);  // nullptr when unknown
// "qa, mlm, generate, ...": the task.kind values, for messages.
std::string task_names();

const char* to_string(TaskKind kind);
const char* to_string(ModelRole role);  // "encoder" / "decoder"

// Completeness check of the per-library tables (flows, compare functions): row i is for TaskKind i
// and is complete (Row::complete(): its functions are set). Used in static_asserts next to those tables.
template <class Row, std::size_t N>
constexpr bool rows_cover_every_task(const Row (&rows)[N]) {
  if (N != kTaskCount) return false;
  for (std::size_t i = 0; i < N; ++i) {
    if (static_cast<std::size_t>(rows[i].kind) != i || !rows[i].complete()) return false;
  }
  return true;
}

}  // namespace evalrun
