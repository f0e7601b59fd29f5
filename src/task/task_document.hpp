// One document of a benchmark task (tasks/*.toml, task/task_file.hpp) after its templates and few-shot
// examples are applied: the requests a scoring task sends to the model and what it scores them against.
// The task-file reader produces these; the multiple_choice and generate_until flows consume them, so
// neither knows the templates and the reader knows no model.
//
// lm-evaluation-harness's ConfigurableTask.construct_requests, for output_type:
//   multiple_choice  requests[i] = (prompt, target_delimiter + choices[i]);
//                    partial scoring (Winogrande: doc_to_text yields the choice list, doc_to_target the
//                    shared continuation) requests[i] = (prompt_i, target_delimiter + continuation);
//   generate_until   one prompt, generated until a stop string; `target` is the gold answer text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace evalrun {

struct TaskRequestText {
  std::string context;       // few-shot examples + this document's text, as the model sees it
  std::string continuation;  // what is scored (multiple_choice); "" for generate_until
};

struct TaskDocument {
  std::uint64_t doc_id = 0;  // 0-based position in the data set (lm-eval's doc_id)
  std::string where;         // "file:line" of the document, for messages
  std::string doc_json;      // the document's JSON line as read (samples JSONL "doc", its hash)
  std::vector<TaskRequestText> requests;  // one per choice (multiple_choice); one (generate_until)
  std::vector<std::string> choices;       // doc_to_choice's texts, without the delimiter (acc_norm lengths)
  std::int64_t gold = -1;                 // index into choices (multiple_choice)
  std::string target;                     // doc_to_target's text (generate_until's gold answer)
};

}  // namespace evalrun
