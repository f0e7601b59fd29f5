// JSON Lines data sets (one JSON object per line): the one reader every .jsonl input goes through
// (prompts, MLM samples, loglikelihood requests, task-file documents), so a malformed line reads the
// same everywhere: exit 2 naming file:line.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace evalrun {

struct JsonlLine {
  std::size_t lineno = 0;  // 1-based
  std::string where;       // "path:lineno", for messages
  std::string text;        // the line as read (no trailing CR)
  const nlohmann::json* value = nullptr;  // the parsed object, valid during the call
};

// Calls `each` for every non-blank line of `path` in order (blank: JSON whitespace only; a trailing CR
// is dropped). InputError naming the file when it cannot be opened (`what`: "data set file",
// "prompt file") and naming file:line for JSON nested deeper than the parser limit, malformed JSON or
// a line that is not an object. Returns the lines read.
std::size_t for_each_jsonl_object(const std::string& path, const std::string& what,
                                  const std::function<void(const JsonlLine&)>& each);

// The line's "id": a string, or an integer written in decimal; "" when the line has none. Anything
// else (null included) is an InputError naming the line.
std::string jsonl_id(const JsonlLine& l);

}  // namespace evalrun
