#include "io/text_dataset.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun {
namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }
}  // namespace

std::vector<TextSample> read_text_samples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open data set file");
  const bool jsonl = ends_with(path, ".jsonl");
  std::vector<TextSample> samples;
  std::unordered_set<std::string> seen;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    TextSample s;
    if (jsonl) {
      nlohmann::json j;
      try {
        check_json_nesting(line, path, static_cast<std::size_t>(lineno));
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
        throw InputError(where, "malformed JSON: " + clip_text(e.what()));
      }
      if (!j.is_object()) throw InputError(where, "expected a JSON object per line");
      if (!j.contains("text") || !j["text"].is_string()) throw InputError(where, "missing string field \"text\"");
      s.text = j["text"].get<std::string>();
      if (j.contains("id")) {
        if (j["id"].is_string()) s.id = j["id"].get<std::string>();
        else if (j["id"].is_number_integer()) s.id = std::to_string(j["id"].get<long long>());
        else throw InputError(where, "\"id\" must be a string or an integer");
      }
      if (j.contains("targets")) {
        const auto& t = j["targets"];
        if (t.is_string()) {
          s.targets.push_back(t.get<std::string>());
        } else if (t.is_array()) {
          for (const auto& x : t) {
            if (!x.is_string()) throw InputError(where, "\"targets\" must hold strings");
            s.targets.push_back(x.get<std::string>());
          }
        } else {
          throw InputError(where, "\"targets\" must be a string or a list of strings");
        }
      }
    } else {
      s.text = line;
    }
    if (s.id.empty()) s.id = "line-" + std::to_string(lineno);
    if (!seen.insert(s.id).second) throw InputError(where, "duplicate sample id '" + s.id + "'");
    samples.push_back(std::move(s));
  }
  if (samples.empty()) throw InputError(path, "data set holds no samples");
  return samples;
}

}  // namespace evalrun
