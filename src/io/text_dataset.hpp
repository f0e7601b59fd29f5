// Text samples for the masked-LM task: a .jsonl file of {"id", "text", "targets"} objects, or any other
// file read as one text per non-empty line.
#pragma once

#include <string>
#include <vector>

namespace evalrun {

struct TextSample {
  std::string id;                    // "line-N" (1-based line number) when the file gives none
  std::string text;
  std::vector<std::string> targets;  // expected fill-ins, one per <mask>; empty when unknown
};

// Errors name the file and line: malformed JSON, missing or non-string "text", non-string targets,
// duplicate ids, an empty file.
std::vector<TextSample> read_text_samples(const std::string& path);

}  // namespace evalrun
