#include "io/text_dataset.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/errors.hpp"
#include "io/jsonl.hpp"

namespace evalrun {
namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// A jsonl sample: "text", optional "id" (string or integer) and "targets" (a string or strings).
TextSample jsonl_sample(const JsonlLine& l) {
  const nlohmann::json& j = *l.value;
  TextSample s;
  if (!j.contains("text") || !j["text"].is_string()) throw InputError(l.where, "missing string field \"text\"");
  s.text = j["text"].get<std::string>();
  s.id = jsonl_id(l);
  if (j.contains("targets")) {
    const auto& t = j["targets"];
    if (t.is_string()) {
      s.targets.push_back(t.get<std::string>());
    } else if (t.is_array()) {
      for (const auto& x : t) {
        if (!x.is_string()) throw InputError(l.where, "\"targets\" must hold strings");
        s.targets.push_back(x.get<std::string>());
      }
    } else {
      throw InputError(l.where, "\"targets\" must be a string or a list of strings");
    }
  }
  return s;
}

}  // namespace

std::vector<TextSample> read_text_samples(const std::string& path) {
  std::vector<TextSample> samples;
  std::unordered_set<std::string> seen;
  const auto add = [&](TextSample s, std::size_t lineno, const std::string& where) {
    if (s.id.empty()) s.id = "line-" + std::to_string(lineno);
    if (!seen.insert(s.id).second) throw InputError(where, "duplicate sample id '" + s.id + "'");
    samples.push_back(std::move(s));
  };
  if (ends_with(path, ".jsonl")) {
    for_each_jsonl_object(path, "data set file", [&](const JsonlLine& l) { add(jsonl_sample(l), l.lineno, l.where); });
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path, "cannot open data set file");
    std::string line;
    std::size_t lineno = 0;
    while (std::getline(in, line)) {  // one sample per non-blank line
      ++lineno;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (blank(line)) continue;
      TextSample s;
      s.text = line;
      add(std::move(s), lineno, path + ":" + std::to_string(lineno));
    }
  }
  if (samples.empty()) throw InputError(path, "data set holds no samples");
  return samples;
}

}  // namespace evalrun
