// SQuAD question-answering data sets: the official v1.1 / v2.0 JSON layout, or JSON lines.
#pragma once

#include <string>
#include <vector>

namespace evalrun {

struct SquadAnswer {
  std::string text;
  // Offset of the answer in the context in Unicode code points (Python str indices), as SQuAD stores it;
  // NOT a byte offset into the UTF-8 `context`.
  int answer_start = 0;
};

struct SquadExample {
  std::string id;
  std::string title;
  std::string question;  // as in the file (not stripped)
  std::string context;
  std::vector<SquadAnswer> answers;  // empty for v2.0 unanswerable questions
  bool is_impossible = false;
};

// Reads a data set, keeping the order of the file.
//  * "*.jsonl": one JSON object per (non-blank) line with id, question, context, answers (list of
//    {text, answer_start}) and optional title, is_impossible.
//  * anything else: {"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
//    "answers": [...], "is_impossible"?}]}]}]} (SQuAD v1.1 / v2.0).
// Every answer must appear in its context at answer_start (code points). InputError naming the file,
// the line (jsonl) and the question id on malformed JSON, missing or mistyped fields, duplicate ids and
// misplaced answers.
std::vector<SquadExample> read_squad(const std::string& path);

}  // namespace evalrun
