#include "tokenizer/slow_files.hpp"

#include <stdexcept>
#include <string_view>

#include "common/errors.hpp"
#include "common/text.hpp"

namespace evalrun {

void for_each_added_token(const nlohmann::json& config, const std::string& file,
                          const std::function<void(std::int64_t, const nlohmann::json&, const std::string&)>& each) {
  if (!config.contains("added_tokens_decoder")) return;
  const nlohmann::json& dec = config["added_tokens_decoder"];
  if (!dec.is_object()) throw InputError(file + ": added_tokens_decoder", "expected an object");
  for (auto it = dec.begin(); it != dec.end(); ++it) {
    const std::string where = file + ": added_tokens_decoder." + it.key();
    std::int64_t id = -1;
    try {
      std::size_t used = 0;
      id = std::stoll(it.key(), &used);
      if (used != it.key().size() || id < 0) throw std::invalid_argument("id");
    } catch (const std::exception&) {
      throw InputError(where, "the key must be a token id");
    }
    each(id, it.value(), where);
  }
}

std::vector<MergeRule> read_merges_txt(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<MergeRule> rules;
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    std::vector<std::string_view> parts;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) parts.push_back(line.substr(i, j - i));
      i = j;
    }
    if (parts.empty()) continue;  // blank line (e.g. the end of the file)
    const std::string where = path + ":" + std::to_string(line_no);
    if (parts.size() != 2) {
      throw InputError(where, "a merge rule must be two tokens separated by a space, got '" + std::string(line) + "'");
    }
    rules.push_back({std::string(parts[0]), std::string(parts[1]), where});
  }
  return rules;
}

}  // namespace evalrun
