#include "io/squad.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/errors.hpp"
#include "common/utf8.hpp"
#include "common/text.hpp"
#include "common/parse_limits.hpp"

namespace evalrun {
namespace {

using nlohmann::json;

// Code point offsets: utf8_code_point_starts (nlohmann's parser rejects ill-formed UTF-8, so the text
// is valid).
std::vector<std::size_t> code_point_starts(const std::string& text) { return utf8_code_point_starts(text); }

// 1-based line of byte `pos` in `text` (for JSON parse errors, which report byte positions).
std::size_t line_of(const std::string& text, std::size_t pos) {
  pos = std::min(pos, text.size());
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
}

const char* type_name(const json& j) { return j.type_name(); }

// Field access with errors that name the field and what was found.
const json& require(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) throw InputError(where, std::string("missing field '") + key + "'");
  return *it;
}

std::string require_string(const json& obj, const char* key, const std::string& where) {
  const json& v = require(obj, key, where);
  if (!v.is_string()) {
    throw InputError(where, std::string("field '") + key + "' must be a string, got " + type_name(v));
  }
  return v.get<std::string>();
}

const json& require_array(const json& obj, const char* key, const std::string& where) {
  const json& v = require(obj, key, where);
  if (!v.is_array()) {
    throw InputError(where, std::string("field '") + key + "' must be a list, got " + type_name(v));
  }
  return v;
}

void require_object(const json& v, const std::string& where) {
  if (!v.is_object()) throw InputError(where, std::string("expected a JSON object, got ") + type_name(v));
}

// Reads answers + is_impossible of one question and checks each answer against the context.
// `cp_starts` is code_point_starts(context), shared by the questions of one paragraph.
void read_answers(const json& q, SquadExample& ex, const std::vector<std::size_t>& cp_starts,
                  const std::string& where) {
  const json& answers = require_array(q, "answers", where);
  for (std::size_t k = 0; k < answers.size(); ++k) {
    const json& a = answers[k];
    const std::string aw = where + ": answers[" + std::to_string(k) + "]";
    require_object(a, aw);
    SquadAnswer ans;
    ans.text = require_string(a, "text", aw);
    const json& start = require(a, "answer_start", aw);
    if (!start.is_number_integer()) {
      throw InputError(aw, std::string("field 'answer_start' must be an integer, got ") + type_name(start));
    }
    const std::int64_t s = start.get<std::int64_t>();
    const auto n_chars = static_cast<std::int64_t>(cp_starts.size() - 1);
    if (s < 0 || s > n_chars) {
      throw InputError(aw, "answer_start " + std::to_string(s) + " is outside the context (" +
                               std::to_string(n_chars) + " characters)");
    }
    const std::size_t byte = cp_starts[static_cast<std::size_t>(s)];
    if (ex.context.compare(byte, ans.text.size(), ans.text) != 0) {
      const std::size_t show_end = std::min(ex.context.size(), byte + ans.text.size() + 8);
      throw InputError(aw, "the context at answer_start " + std::to_string(s) +
                               " (a character index) does not start with the answer text \"" + ans.text +
                               "\"; it reads \"" + ex.context.substr(byte, show_end - byte) + "\"");
    }
    ans.answer_start = static_cast<int>(s);
    ex.answers.push_back(std::move(ans));
  }
  if (auto it = q.find("is_impossible"); it != q.end()) {
    if (!it->is_boolean()) {
      throw InputError(where, std::string("field 'is_impossible' must be true or false, got ") + type_name(*it));
    }
    ex.is_impossible = it->get<bool>();
  }
}

// "path: question 'id'" once the id is known, else the JSON position.
std::string question_where(const std::string& prefix, const json& q, const std::string& fallback) {
  auto it = q.find("id");
  if (it != q.end() && it->is_string()) return prefix + ": question '" + it->get<std::string>() + "'";
  return prefix + ": " + fallback;
}

void check_unique(std::unordered_set<std::string>& seen, const SquadExample& ex, const std::string& where) {
  if (!seen.insert(ex.id).second) throw InputError(where, "duplicate question id '" + ex.id + "'");
}

std::vector<SquadExample> read_squad_json(const std::string& path, const std::string& text) {
  check_json_nesting(text, path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(path + ":" + std::to_string(line_of(text, e.byte == 0 ? 0 : e.byte - 1)),
                     "malformed JSON: " + clip_text(e.what()));
  } catch (const json::exception& e) {
    // nlohmann reports a number too large for a double (1e400) as out_of_range, not parse_error.
    throw InputError(path, "malformed JSON: " + clip_text(e.what()));
  }
  require_object(doc, path);
  const json& data = require_array(doc, "data", path);
  std::vector<SquadExample> out;
  std::unordered_set<std::string> seen;
  for (std::size_t a = 0; a < data.size(); ++a) {
    const std::string aw = path + ": data[" + std::to_string(a) + "]";
    require_object(data[a], aw);
    std::string title;
    if (auto it = data[a].find("title"); it != data[a].end()) {
      if (!it->is_string()) throw InputError(aw, std::string("field 'title' must be a string, got ") + type_name(*it));
      title = it->get<std::string>();
    }
    const json& paragraphs = require_array(data[a], "paragraphs", aw);
    for (std::size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string pw = aw + ".paragraphs[" + std::to_string(p) + "]";
      require_object(paragraphs[p], pw);
      const std::string context = require_string(paragraphs[p], "context", pw);
      const std::vector<std::size_t> cp_starts = code_point_starts(context);
      const json& qas = require_array(paragraphs[p], "qas", pw);
      for (std::size_t k = 0; k < qas.size(); ++k) {
        const json& q = qas[k];
        const std::string qpos = pw.substr(path.size() + 2) + ".qas[" + std::to_string(k) + "]";
        require_object(q, path + ": " + qpos);
        const std::string where = question_where(path, q, qpos);
        SquadExample ex;
        ex.id = require_string(q, "id", where);
        ex.title = title;
        ex.question = require_string(q, "question", where);
        ex.context = context;
        read_answers(q, ex, cp_starts, where);
        check_unique(seen, ex, where);
        out.push_back(std::move(ex));
      }
    }
  }
  return out;
}

std::vector<SquadExample> read_squad_jsonl(const std::string& path, const std::string& text) {
  std::vector<SquadExample> out;
  std::unordered_set<std::string> seen;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const std::string lw = path + ":" + std::to_string(line_no);
    json q;
    try {
      check_json_nesting(line, path, line_no);
      q = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
      throw InputError(lw, "malformed JSON: " + clip_text(e.what()));
    }
    require_object(q, lw);
    const std::string where = question_where(lw, q, "line " + std::to_string(line_no));
    SquadExample ex;
    ex.id = require_string(q, "id", where);
    if (q.contains("title")) ex.title = require_string(q, "title", where);
    ex.question = require_string(q, "question", where);
    ex.context = require_string(q, "context", where);
    read_answers(q, ex, code_point_starts(ex.context), where);
    check_unique(seen, ex, where);
    out.push_back(std::move(ex));
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<SquadExample> read_squad(const std::string& path) {
  const std::string text = read_file(path);
  auto examples = ends_with(path, ".jsonl") ? read_squad_jsonl(path, text) : read_squad_json(path, text);
  // As the other tasks' readers: an empty data set is bad input, not an empty result.
  if (examples.empty()) throw InputError(path, "data set holds no samples (no questions)");
  return examples;
}

}  // namespace evalrun
