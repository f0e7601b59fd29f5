#include "io/prompts.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/text.hpp"
#include "common/utf8.hpp"
#include "io/jsonl.hpp"

namespace evalrun {
namespace fs = std::filesystem;
namespace {

struct Set {
  std::string name, templ;
  std::vector<std::string> entries;
};

const std::vector<Set>& builtin_sets() {
  static const std::vector<Set> sets = {
      {"chat",
       "Below is an instruction that describes a task. Write a response that appropriately completes the "
       "request.\n\n### Instruction:\n{}\n\n### Response:",
       {
           "Give step-by-step instructions for planting tomato seedlings in a small garden.",
           "Describe three common ways people say goodbye in French and when each one is used.",
           "Explain in plain language why regular sleep matters for memory.",
           "Suggest a week of simple vegetarian dinners that use inexpensive ingredients.",
           "Explain how the gears of a bicycle make climbing a hill easier.",
       }},
      {"code",
       "# Complete the following Python function.\n\n{}",
       {
           "def is_palindrome(text: str) -> bool:\n"
           "    \"\"\"Return True if text reads the same forwards and backwards, ignoring case and spaces.\"\"\"\n",
           "def running_total(values: list[int]) -> list[int]:\n"
           "    \"\"\"Return the cumulative sums of values, e.g. [1, 2, 3] -> [1, 3, 6].\"\"\"\n",
           "def count_words(path: str) -> dict[str, int]:\n"
           "    \"\"\"Read the text file at path and return how often each lower-cased word occurs.\"\"\"\n",
           "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
           "    \"\"\"Merge overlapping closed intervals and return them sorted by their start.\"\"\"\n",
           "def to_snake_case(name: str) -> str:\n"
           "    \"\"\"Convert a CamelCase identifier such as \"HttpRequestParser\" to snake_case.\"\"\"\n",
       }},
  };
  return sets;
}

const Set& find_set(const std::string& name) {
  for (const auto& s : builtin_sets()) {
    if (s.name == name) return s;
  }
  std::string names;
  for (const auto& s : builtin_sets()) names += (names.empty() ? "" : ", ") + s.name;
  throw InputError("prompts '" + name + "'", "unknown built-in prompt set (known: " + names + ")");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8_at(s, i);
    if (!c.valid) return false;
    i += static_cast<std::size_t>(c.length);
  }
  return true;
}

// Collects prompts, checking each one and that ids are unique.
class Collector {
 public:
  void add(Prompt p, const std::string& where) {
    if (blank(p.text)) throw InputError(where, "prompt '" + p.id + "' is empty");
    if (!valid_utf8(p.text)) throw InputError(where, "prompt '" + p.id + "' is not valid UTF-8");
    auto [it, inserted] = where_.emplace(p.id, where);
    if (!inserted) throw InputError(where, "duplicate prompt id '" + p.id + "' (first at " + it->second + ")");
    prompts_.push_back(std::move(p));
  }
  std::vector<Prompt> take() { return std::move(prompts_); }

 private:
  std::vector<Prompt> prompts_;
  std::map<std::string, std::string> where_;
};

void read_jsonl(const std::string& path, Collector& out) {
  const std::size_t count = for_each_jsonl_object(path, "prompt file", [&](const JsonlLine& l) {
    const nlohmann::json& j = *l.value;
    Prompt p;
    if (j.contains("id") && !j["id"].is_null()) {  // prompts: a null id is no id, an empty one an error
      p.id = jsonl_id(l);
      if (p.id.empty()) throw InputError(l.where, "\"id\" is empty");
    } else {
      p.id = "line-" + std::to_string(l.lineno);
    }
    if (!j.contains("prompt")) throw InputError(l.where, "missing field \"prompt\"");
    if (!j["prompt"].is_string()) throw InputError(l.where, "\"prompt\" must be a string");
    p.text = j["prompt"].get<std::string>();
    out.add(std::move(p), l.where);
  });
  if (count == 0) throw InputError(path, "prompt file holds no prompts");
}

void read_one_file(const fs::path& file, Collector& out) {
  const std::string path = file.string();
  if (ends_with(path, ".jsonl")) {
    read_jsonl(path, out);
    return;
  }
  out.add(Prompt{file.stem().string(), read_file(path)}, path);
}

bool is_glob(const std::string& spec) { return spec.find_first_of("*?[") != std::string::npos; }

}  // namespace

std::vector<std::string> builtin_prompt_set_names() {
  std::vector<std::string> names;
  for (const auto& s : builtin_sets()) names.push_back(s.name);
  return names;
}

const std::string& builtin_prompt_template(const std::string& name) { return find_set(name).templ; }

std::string apply_prompt_template(const std::string& templ, const std::string& text) {
  const auto at = templ.find("{}");
  if (at == std::string::npos) return templ;
  return templ.substr(0, at) + text + templ.substr(at + 2);
}

std::vector<Prompt> builtin_prompts(const std::string& name) {
  const Set& s = find_set(name);
  std::vector<Prompt> out;
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    out.push_back(Prompt{s.name + "-" + std::to_string(i + 1), apply_prompt_template(s.templ, s.entries[i])});
  }
  return out;
}

std::vector<Prompt> read_prompts(const std::string& spec) {
  const auto names = builtin_prompt_set_names();
  if (std::find(names.begin(), names.end(), spec) != names.end()) return builtin_prompts(spec);
  if (spec.empty()) throw InputError("prompts", "empty prompt path");

  Collector out;
  if (is_glob(spec)) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    std::vector<fs::path> files;
    if (rc == 0) {
      for (std::size_t i = 0; i < g.gl_pathc; ++i) {
        const fs::path p(g.gl_pathv[i]);
        if (fs::is_regular_file(p)) files.push_back(p);
      }
    }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) throw InputError(spec, "cannot expand the glob pattern");
    if (files.empty()) throw InputError(spec, "no prompt files match the pattern");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_one_file(f, out);
    return out.take();
  }

  const fs::path p(spec);
  if (fs::is_directory(p)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p)) {
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
    }
    if (files.empty()) throw InputError(spec, "directory holds no *.txt prompt files");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_one_file(f, out);
    return out.take();
  }
  if (!fs::exists(p)) throw InputError(spec, "prompt file or directory does not exist");
  read_one_file(p, out);
  return out.take();
}

}  // namespace evalrun
