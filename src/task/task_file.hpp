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

  // Templates (task/template.hpp syntax), checked when the file is read.
  std::string description;      // rendered per document, prefix of every prompt
  std::string doc_to_text;
  std::string doc_to_target;
  // doc_to_choice: one template whose value is a list (choice_template_is_list), or one template per
  // choice. Empty for generate_until / loglikelihood.
  std::vector<std::string> doc_to_choice;
  bool choice_template_is_list = false;
  // `multiple_inputs` = lm-eval's multiple_inputs (Winogrande's partial scoring): doc_to_text renders the gold index,
  // doc_to_choice the per-choice contexts, doc_to_target the shared continuation.
  bool multiple_input = false;
  // `fewshot_sampler = "first_n"`: the first examples of the pool in order (lm-eval's first_n, MMLU)
  // instead of the seeded draw ("default").
  bool fewshot_first_n = false;

  // [[preprocess]]: applied in order to every document before the templates, like lm-eval's
  // process_docs. Each rule names `field` and does one thing: set it from a template, strip it,
  // replace a literal, or replace a regex (ECMAScript syntax, $1 in the replacement); a list of
  // strings is processed element by element.
  struct Preprocess {
    std::string field;
    enum Kind { kSet, kStrip, kReplace, kRegex } kind = kSet;
    std::string a;  // kSet: template; kReplace/kRegex: what is replaced
    std::string b;  // kReplace/kRegex: replacement
  };
  std::vector<Preprocess> preprocess;

  // generate_until only, lm-eval's generation_kwargs, filter_list and exact_match settings; the
  // generation flow applies them (task/generate_until.hpp). Regular expressions are Python `re`
  // syntax, compiled there (PyRegex::compile, naming "<task file>: filter[i].regex").
  std::vector<std::string> until;
  int max_gen_toks = 256;
  struct Filter {                   // [[filter]]: one RegexFilter pipeline, metric "exact_match,<name>"
    std::string name;
    std::string regex;
    int group_select = 0;           // which match: 0 first, -1 last
    std::string fallback = "[invalid]";
  };
  std::vector<Filter> filters;      // none: the response as it is (lm-eval's "none")
  bool ignore_case = false;         // exact_match settings
  bool ignore_punctuation = false;
  bool ignore_numbers = false;
  bool strip = false;
  std::vector<std::string> regexes_to_ignore;
};

// output_type is also "loglikelihood" (lm-eval's LAMBADA): one request (text, target), the
// target as rendered (lm-eval adds no delimiter there).
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
