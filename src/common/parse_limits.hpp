// Limits checked on a file's text before it reaches a parser, so a hostile or broken file is one
// InputError naming the file and line instead of a crash or minutes of work inside the parser:
//   - toml11 recurses once per nesting level of arrays and inline tables (an inline table a few
//     thousand levels deep overflows the stack: SIGSEGV), and takes quadratic time in the depth of
//     arrays and of dotted keys (50,000 levels: half a minute);
//   - nlohmann::json parses deep nesting iteratively, but copying or printing such a value recurses
//     (a million levels: SIGSEGV), and the readers copy parts of what they parse.
// Real files nest a handful of levels (config.json 3, tokenizer.json 5, a run config 2).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace evalrun {

inline constexpr int kMaxNesting = 64;                              // [ / { levels, dotted key parts
inline constexpr std::size_t kMaxTomlBytes = std::size_t{16} << 20;  // a run config, jobs or thresholds file

// A TOML document from `origin` (a file name, "--set ..."): valid UTF-8 (toml11 3.7 reads past its
// buffer reporting invalid UTF-8 in a literal string), at most kMaxTomlBytes, arrays and inline tables
// nested at most kMaxNesting deep, keys of at most kMaxNesting dotted parts. InputError "origin:line".
void check_toml_limits(std::string_view text, const std::string& origin);

// JSON text from `file` whose first line is line `first_line` there (a jsonl record): arrays and objects
// nested at most kMaxNesting deep. InputError "file:line". Malformed JSON is left to the parser.
void check_json_nesting(std::string_view text, const std::string& file, std::size_t first_line = 1);

}  // namespace evalrun
