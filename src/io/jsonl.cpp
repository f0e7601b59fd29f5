#include "io/jsonl.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun {

std::size_t for_each_jsonl_object(const std::string& path, const std::string& what,
                                  const std::function<void(const JsonlLine&)>& each) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open " + what);
  std::size_t lines = 0;
  JsonlLine l;
  while (std::getline(in, l.text)) {
    ++l.lineno;
    if (!l.text.empty() && l.text.back() == '\r') l.text.pop_back();
    if (l.text.find_first_not_of(" \t\r") == std::string::npos) continue;
    l.where = path + ":" + std::to_string(l.lineno);
    nlohmann::json value;
    try {
      check_json_nesting(l.text, path, l.lineno);
      value = nlohmann::json::parse(l.text);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
      throw InputError(l.where, "malformed JSON: " + clip_text(e.what()));
    }
    if (!value.is_object()) throw InputError(l.where, "expected a JSON object per line");
    l.value = &value;
    each(l);
    ++lines;
  }
  return lines;
}

std::string jsonl_id(const JsonlLine& l) {
  const nlohmann::json& j = *l.value;
  if (!j.contains("id")) return "";
  const auto& id = j["id"];
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_integer()) return std::to_string(id.get<long long>());
  throw InputError(l.where, "\"id\" must be a string or an integer");
}

}  // namespace evalrun
