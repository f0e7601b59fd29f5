// A benchmark task file (tasks/*.toml): how the documents of a JSONL data set become the requests of
// lm-evaluation-harness's output types (multiple_choice, generate_until), with few-shot prompts.
// The format and the template syntax are in docs/tasks.md, "Task files".
//
// (Interface agreed between the taskfile and mc helpers; the taskfile helper implements it and may
// add fields.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "task/task_document.hpp"

namespace evalrun {

struct TaskFile {
  std::string path;             // the .toml file as given
  std::string name;             // `name`
  std::string output_type;      // "multiple_choice" | "generate_until"
  std::string dataset;          // `dataset` resolved against the task file's folder; "" = not given
  std::string fewshot_dataset;  // `fewshot_dataset` resolved likewise; "" = the documents themselves
  std::string target_delimiter = " ";
  std::string fewshot_delimiter = "\n\n";
  std::string toml_text;        // the file's text, for provenance and lm-eval's results "configs"
  // ... the templates and the other settings (implementation's choice)
};

// InputError (exit 2) naming the file and key for an unreadable file, an unknown key, a wrong type.
TaskFile read_task_file(const std::string& path);

struct FewshotSpec {
  int num_fewshot = 0;
  std::uint64_t seed = 1234;  // lm-eval's default fewshot seed
};

// The documents of `dataset` (JSONL; "" = task.dataset) in file order, the first max_docs of them
// (0 = all), each with its few-shot prompt. InputError naming the task file, the template and the
// document's file:line for a field a template names that the document lacks.
std::vector<TaskDocument> build_task_documents(const TaskFile& task, const std::string& dataset,
                                               const FewshotSpec& fewshot, std::size_t max_docs);

}  // namespace evalrun
