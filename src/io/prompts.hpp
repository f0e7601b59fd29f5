// Prompts for generation runs: files, directories, glob patterns, or a built-in set.
//
// read_prompts(spec) decides by the spec:
//   "chat" / "code"          a built-in set (builtin_prompts); write "./chat" for a file named chat.
//   contains * ? or [        a glob pattern: every matching file, sorted by path; each read as below.
//   a directory              every *.txt file directly inside it, sorted by name (the seed's default
//                            "*.txt" glob); one prompt per file.
//   a .jsonl file            one JSON object per non-blank line: {"id": string or integer (optional,
//                            default "line-N", N 1-based), "prompt": string}; other keys are ignored.
//   any other file           ONE prompt: the whole file, verbatim (a trailing newline is part of the
//                            prompt, as in the seed's inference.py, which reads each file with
//                            read_text()); its id is the file name without extension (the stem).
// Prompts come back in that order. Errors are InputErrors naming the file (and line for .jsonl):
// a missing path, malformed JSON, a missing or non-string "prompt", an empty or all-whitespace prompt,
// invalid UTF-8 (naming the prompt id), a duplicate id (naming both places), a glob or directory that
// matches no file, a .jsonl file without prompts.
#pragma once

#include <string>
#include <vector>

namespace evalrun {

struct Prompt {
  std::string id;
  std::string text;
};

std::vector<Prompt> read_prompts(const std::string& spec);

// Built-in sets, original texts: "chat" (instructions in an Alpaca-style instruction template) and
// "code" (Python function signatures with docstrings to complete). Ids "chat-1", ... / "code-1", ....
// The texts come back with their template applied. Unknown name: InputError listing the names.
std::vector<Prompt> builtin_prompts(const std::string& name);
std::vector<std::string> builtin_prompt_set_names();
// The set's template; "{}" marks where each entry goes.
const std::string& builtin_prompt_template(const std::string& name);
// `text` put in place of the first "{}" of `templ` (templ unchanged when it has none).
std::string apply_prompt_template(const std::string& templ, const std::string& text);

}  // namespace evalrun
