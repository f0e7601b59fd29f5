#include "task/task_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "common/errors.hpp"
#include "io/jsonl.hpp"
#include "common/text.hpp"
#include "common/toml_file.hpp"
#include "task/py_random.hpp"
#include "task/template.hpp"

namespace evalrun {
namespace {

using json = nlohmann::json;

// ---- reading the task file ----

std::string type_phrase(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    default: return "a date/time";
  }
}

struct Reader {
  const std::string& path;

  std::string where(const std::string& key, const toml::value& v) const {
    const auto loc = v.location();
    return loc.line() > 0 ? path + ":" + std::to_string(loc.line()) + ": " + key : path + ": " + key;
  }
  [[noreturn]] void wrong(const std::string& key, const toml::value& v, const char* expected) const {
    throw InputError(where(key, v), std::string("must be ") + expected + ", got " + type_phrase(v));
  }
  std::string str(const std::string& key, const toml::value& v) const {
    if (!v.is_string()) wrong(key, v, "a string");
    return v.as_string().str;
  }
  bool boolean(const std::string& key, const toml::value& v) const {
    if (!v.is_boolean()) wrong(key, v, "a boolean");
    return v.as_boolean();
  }
  int integer(const std::string& key, const toml::value& v, long long lo, long long hi) const {
    if (!v.is_integer()) wrong(key, v, "an integer");
    const long long n = v.as_integer();
    if (n < lo || n > hi) {
      throw InputError(where(key, v), "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                                          std::to_string(n));
    }
    return static_cast<int>(n);
  }
  std::vector<std::string> strings(const std::string& key, const toml::value& v) const {
    if (!v.is_array()) wrong(key, v, "an array of strings");
    std::vector<std::string> out;
    for (const auto& e : v.as_array()) {
      if (!e.is_string()) wrong(key, e, "an array of strings");
      out.push_back(e.as_string().str);
    }
    return out;
  }
  std::string templ(const std::string& key, const toml::value& v) const {
    std::string t = str(key, v);
    try {
      Template check(t);
    } catch (const TemplateError& e) {
      throw InputError(where(key, v), std::string("bad template: ") + e.what());
    }
    return t;
  }
  void regex(const std::string& key, const toml::value& v, const std::string& pattern) const {
    try {
      std::regex check(pattern);
    } catch (const std::regex_error& e) {
      throw InputError(where(key, v), "bad regular expression " + quote_short(pattern) + ": " + e.what());
    }
  }
};

// Keys in a stable order, so the first of several errors is the same on every run.
std::vector<std::pair<std::string, const toml::value*>> sorted(const toml::table& t) {
  std::vector<std::pair<std::string, const toml::value*>> out;
  for (const auto& [k, v] : t) out.emplace_back(k, &v);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto la = a.second->location().line(), lb = b.second->location().line();
    return la != lb ? la < lb : a.first < b.first;
  });
  return out;
}

TaskFile::Preprocess read_preprocess(const Reader& r, const std::string& key, const toml::value& v) {
  if (!v.is_table()) r.wrong(key, v, "a table ([[preprocess]])");
  TaskFile::Preprocess p;
  int ops = 0;
  bool has_field = false;
  for (const auto& [k, e] : sorted(v.as_table())) {
    const std::string full = key + "." + k;
    if (k == "field") {
      p.field = r.str(full, *e);
      has_field = true;
    } else if (k == "set") {
      p.kind = TaskFile::Preprocess::kSet;
      p.a = r.templ(full, *e);
      ++ops;
    } else if (k == "strip") {
      if (!r.boolean(full, *e)) throw InputError(r.where(full, *e), "must be true (leave it out for no strip)");
      p.kind = TaskFile::Preprocess::kStrip;
      ++ops;
    } else if (k == "replace" || k == "regex") {
      const auto pair = r.strings(full, *e);
      if (pair.size() != 2) throw InputError(r.where(full, *e), "must be [\"from\", \"to\"]");
      p.kind = k == "replace" ? TaskFile::Preprocess::kReplace : TaskFile::Preprocess::kRegex;
      if (k == "regex") r.regex(full, *e, pair[0]);
      p.a = pair[0];
      p.b = pair[1];
      ++ops;
    } else {
      throw InputError(r.where(full, *e), "unknown key (field, set, strip, replace, regex)");
    }
  }
  if (!has_field || p.field.empty()) throw InputError(r.where(key, v), "needs field = \"name\"");
  if (ops != 1) throw InputError(r.where(key, v), "needs exactly one of set, strip, replace, regex");
  return p;
}

TaskFile::Filter read_filter(const Reader& r, const std::string& key, const toml::value& v) {
  if (!v.is_table()) r.wrong(key, v, "a table ([[filter]])");
  TaskFile::Filter f;
  for (const auto& [k, e] : sorted(v.as_table())) {
    const std::string full = key + "." + k;
    if (k == "name") f.name = r.str(full, *e);
    else if (k == "regex") f.regex = r.str(full, *e);
    else if (k == "group_select") f.group_select = r.integer(full, *e, -1000, 1000);
    else if (k == "fallback") f.fallback = r.str(full, *e);
    else throw InputError(r.where(full, *e), "unknown key (name, regex, group_select, fallback)");
  }
  if (f.name.empty() || f.regex.empty()) throw InputError(r.where(key, v), "needs name and regex");
  return f;
}

std::string resolve(const std::string& task_path, const std::string& file) {
  const std::filesystem::path p(file);
  if (p.is_absolute()) return file;
  return (std::filesystem::path(task_path).parent_path() / p).lexically_normal().string();
}

// ---- documents ----

struct Doc {
  std::string where;
  std::string line;
  json value;
};

std::vector<Doc> read_jsonl(const std::string& path) {
  refuse_directory(path);
  std::vector<Doc> out;
  for_each_jsonl_object(path, "data set file", [&](const JsonlLine& l) { out.push_back({l.where, l.text, *l.value}); });
  if (out.empty()) throw InputError(path, "data set holds no documents");
  return out;
}

[[noreturn]] void doc_error(const TaskFile& task, const Doc& d, const std::string& key, const std::string& what) {
  throw InputError(d.where, task.path + ": " + key + ": " + what);
}

json process_string(const TaskFile::Preprocess& p, const json& v, const std::regex* re) {
  if (!v.is_string()) throw TemplateError("is not a string or a list of strings");
  std::string s = v.get<std::string>();
  if (p.kind == TaskFile::Preprocess::kStrip) {
    const char* ws = " \t\n\r\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
  }
  if (p.kind == TaskFile::Preprocess::kReplace) {
    if (p.a.empty()) return s;
    std::string out;
    std::size_t pos = 0;
    for (std::size_t hit; (hit = s.find(p.a, pos)) != std::string::npos; pos = hit + p.a.size()) {
      out.append(s, pos, hit - pos);
      out += p.b;
    }
    out.append(s, pos);
    return out;
  }
  return std::regex_replace(s, *re, p.b);
}

void apply_preprocess(const TaskFile& task, const std::vector<std::regex>& regexes, Doc& d) {
  for (std::size_t i = 0; i < task.preprocess.size(); ++i) {
    const auto& p = task.preprocess[i];
    const std::string key = "preprocess[" + std::to_string(i) + "] (field " + p.field + ")";
    try {
      if (p.kind == TaskFile::Preprocess::kSet) {
        d.value[p.field] = Template(p.a).evaluate(d.value);
        continue;
      }
      auto it = d.value.find(p.field);
      if (it == d.value.end()) throw TemplateError("field '" + p.field + "' is missing");
      if (it->is_array()) {
        for (auto& e : *it) e = process_string(p, e, &regexes[i]);
      } else {
        *it = process_string(p, *it, &regexes[i]);
      }
    } catch (const TemplateError& e) {
      doc_error(task, d, key, e.what());
    }
  }
}

// One document's templates applied (no few-shot context yet).
struct Rendered {
  std::string text;                  // doc_to_text (multiple_input: unused)
  std::vector<std::string> choices;
  std::int64_t gold = -1;
  std::string target;                // doc_to_target's text; multiple_choice: choices[gold]
};

// lm-eval turns a rendered target that is all digits into an index.
bool digits_index(const json& v, std::int64_t* out) {
  if (v.is_number_integer()) {
    *out = v.get<std::int64_t>();
    return true;
  }
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(s);
  return true;
}

struct Compiled {
  Template description, text, target;
  std::vector<Template> choices;
};

Rendered render(const TaskFile& task, const Compiled& c, const Doc& d) {
  Rendered r;
  const char* key = "description";
  try {
    if (!task.doc_to_choice.empty()) {
      key = "doc_to_choice";
      if (task.choice_template_is_list) {
        const json v = c.choices[0].evaluate(d.value);
        if (!v.is_array()) throw TemplateError("value is not a list");
        for (const auto& e : v) r.choices.push_back(value_text(e));
      } else {
        for (const auto& t : c.choices) r.choices.push_back(t.render(d.value));
      }
      if (r.choices.empty()) throw TemplateError("no choices");
    }
    const bool mc = task.output_type == "multiple_choice";
    key = "doc_to_text";
    if (task.multiple_input) {
      const json v = c.text.evaluate(d.value);
      if (!digits_index(v, &r.gold)) throw TemplateError("multiple_inputs: must render a choice index, got " + v.dump());
    } else {
      r.text = c.text.render(d.value);
    }
    key = "doc_to_target";
    const json t = c.target.evaluate(d.value);
    if (mc && !task.multiple_input) {
      if (!digits_index(t, &r.gold)) {
        const std::string s = value_text(t);
        const auto it = std::find(r.choices.begin(), r.choices.end(), s);
        if (it == r.choices.end()) throw TemplateError(quote_short(s) + " is not one of the choices");
        r.gold = it - r.choices.begin();
      }
    } else {
      r.target = value_text(t);
    }
    if (mc) {
      if (r.gold < 0 || r.gold >= static_cast<std::int64_t>(r.choices.size())) {
        throw TemplateError("gold index " + std::to_string(r.gold) + " out of range for " +
                            std::to_string(r.choices.size()) + " choices");
      }
      if (!task.multiple_input) r.target = r.choices[static_cast<std::size_t>(r.gold)];
    }
  } catch (const TemplateError& e) {
    doc_error(task, d, key, e.what());
  }
  return r;
}

// lm-eval's sampler: text(ex) + target_delimiter + target(ex), no delimiter for an empty target;
// multiple_inputs uses the gold context.
std::string example_text(const TaskFile& task, const Rendered& r) {
  std::string out = task.multiple_input ? r.choices[static_cast<std::size_t>(r.gold)] : r.text;
  if (!r.target.empty()) {
    out += task.target_delimiter;
    out += r.target;
  }
  return out;
}

}  // namespace

TaskFile read_task_file(const std::string& path) {
  refuse_directory(path, "task file");
  const toml::value root = read_toml_file(path, "task file");
  const Reader r{path};
  TaskFile t;
  t.path = path;
  t.toml_text = read_file(path);
  bool has_text = false, has_target = false;
  std::vector<std::string> generation_keys;
  for (const auto& [key, vp] : sorted(root.as_table())) {
    const toml::value& v = *vp;
    if (key == "name") t.name = r.str(key, v);
    else if (key == "output_type") {
      t.output_type = r.str(key, v);
      if (t.output_type != "multiple_choice" && t.output_type != "generate_until" && t.output_type != "loglikelihood") {
        throw InputError(r.where(key, v), "must be \"multiple_choice\", \"generate_until\" or \"loglikelihood\", got " +
                                              quote_short(t.output_type));
      }
    } else if (key == "dataset") t.dataset = resolve(path, r.str(key, v));
    else if (key == "fewshot_dataset") t.fewshot_dataset = resolve(path, r.str(key, v));
    else if (key == "target_delimiter") t.target_delimiter = r.str(key, v);
    else if (key == "fewshot_delimiter") t.fewshot_delimiter = r.str(key, v);
    else if (key == "description") t.description = r.templ(key, v);
    else if (key == "doc_to_text") {
      t.doc_to_text = r.templ(key, v);
      has_text = true;
    } else if (key == "doc_to_target") {
      t.doc_to_target = r.templ(key, v);
      has_target = true;
    } else if (key == "doc_to_choice") {
      if (v.is_string()) {
        t.doc_to_choice = {r.templ(key, v)};
        t.choice_template_is_list = true;
      } else if (v.is_array()) {
        for (const auto& e : v.as_array()) t.doc_to_choice.push_back(r.templ(key, e));
        if (t.doc_to_choice.empty()) throw InputError(r.where(key, v), "must name at least one choice");
      } else {
        r.wrong(key, v, "a template whose value is a list, or an array of templates");
      }
    } else if (key == "multiple_inputs") t.multiple_input = r.boolean(key, v);
    else if (key == "fewshot_sampler") {
      const std::string s = r.str(key, v);
      if (s != "default" && s != "first_n") {
        throw InputError(r.where(key, v), "must be \"default\" or \"first_n\", got " + quote_short(s));
      }
      t.fewshot_first_n = s == "first_n";
    } else if (key == "preprocess") {
      if (!v.is_array()) r.wrong(key, v, "an array of tables ([[preprocess]])");
      for (std::size_t i = 0; i < v.as_array().size(); ++i) {
        t.preprocess.push_back(read_preprocess(r, key + "[" + std::to_string(i) + "]", v.as_array()[i]));
      }
    } else if (key == "until") {
      t.until = r.strings(key, v);
      generation_keys.push_back(key);
    } else if (key == "max_gen_toks") {
      t.max_gen_toks = r.integer(key, v, 1, 1 << 20);
      generation_keys.push_back(key);
    } else if (key == "filter") {
      if (!v.is_array()) r.wrong(key, v, "an array of tables ([[filter]])");
      for (std::size_t i = 0; i < v.as_array().size(); ++i) {
        t.filters.push_back(read_filter(r, key + "[" + std::to_string(i) + "]", v.as_array()[i]));
      }
      generation_keys.push_back(key);
    } else if (key == "ignore_case") {
      t.ignore_case = r.boolean(key, v);
      generation_keys.push_back(key);
    } else if (key == "ignore_numbers") {
      t.ignore_numbers = r.boolean(key, v);
      generation_keys.push_back(key);
    } else if (key == "ignore_punctuation") {
      t.ignore_punctuation = r.boolean(key, v);
      generation_keys.push_back(key);
    } else if (key == "strip") {
      t.strip = r.boolean(key, v);
      generation_keys.push_back(key);
    } else if (key == "regexes_to_ignore") {
      t.regexes_to_ignore = r.strings(key, v);  // Python re syntax: compiled by the flow
      generation_keys.push_back(key);
    } else {
      throw InputError(r.where(key, v),
                       "unknown key (name, output_type, dataset, fewshot_dataset, description, doc_to_text, "
                       "doc_to_target, doc_to_choice, target_delimiter, fewshot_delimiter, multiple_inputs, "
                       "fewshot_sampler, preprocess, until, max_gen_toks, filter, ignore_case, ignore_punctuation, "
                       "ignore_numbers, strip, regexes_to_ignore)");
    }
  }
  for (const char* k : {"name", "output_type"}) {
    if (!root.contains(k)) throw InputError(path + ": " + k, "missing (a string)");
  }
  if (!has_text) throw InputError(path + ": doc_to_text", "missing (a template)");
  if (!has_target) throw InputError(path + ": doc_to_target", "missing (a template)");
  const bool mc = t.output_type == "multiple_choice";
  if (mc && t.doc_to_choice.empty()) throw InputError(path + ": doc_to_choice", "missing: multiple_choice needs it");
  if (!mc && !t.doc_to_choice.empty()) {
    throw InputError(path + ": doc_to_choice", "only for output_type multiple_choice, not " + t.output_type);
  }
  if (!mc && t.multiple_input) throw InputError(path + ": multiple_inputs", "only for output_type multiple_choice");
  if (t.output_type != "generate_until" && !generation_keys.empty()) {
    throw InputError(path + ": " + generation_keys.front(), "only for output_type generate_until, not " + t.output_type);
  }
  return t;
}

std::vector<TaskDocument> build_task_documents(const TaskFile& task, const std::string& dataset,
                                               const FewshotSpec& fewshot, std::size_t max_docs) {
  const std::string path = dataset.empty() ? task.dataset : dataset;
  if (path.empty()) throw InputError(task.path + ": dataset", "no data set: the task file names none and none was given");
  if (fewshot.num_fewshot < 0) throw InputError("task.num_fewshot", "must be >= 0, got " + std::to_string(fewshot.num_fewshot));
  Compiled c;
  c.description = Template(task.description);
  c.text = Template(task.doc_to_text);
  c.target = Template(task.doc_to_target);
  for (const auto& s : task.doc_to_choice) c.choices.emplace_back(s);
  std::vector<std::regex> regexes;
  for (const auto& p : task.preprocess) regexes.emplace_back(p.kind == TaskFile::Preprocess::kRegex ? p.a : "");

  std::vector<Doc> docs = read_jsonl(path);
  for (auto& d : docs) apply_preprocess(task, regexes, d);
  const std::size_t n_docs = max_docs > 0 ? std::min(max_docs, docs.size()) : docs.size();

  // Few-shot pool: lm-eval's sampler over the few-shot split, or over the documents themselves; in
  // that case it draws one more and drops the document being built (by content, as lm-eval's `!=`).
  const bool own_pool = task.fewshot_dataset.empty();
  std::vector<Doc> pool_storage;
  if (!own_pool && fewshot.num_fewshot > 0) {
    pool_storage = read_jsonl(task.fewshot_dataset);
    for (auto& d : pool_storage) apply_preprocess(task, regexes, d);
  }
  const std::vector<Doc>& pool = own_pool ? docs : pool_storage;
  const auto k = static_cast<std::size_t>(fewshot.num_fewshot);
  const std::size_t draw = own_pool ? k + 1 : k;
  if (k > 0 && draw > pool.size()) {
    throw InputError(task.path, "num_fewshot " + std::to_string(k) + " needs " + std::to_string(draw) +
                                    " documents in " + (own_pool ? path : task.fewshot_dataset) + ", it has " +
                                    std::to_string(pool.size()));
  }
  std::vector<std::string> pool_text(pool.size());  // rendered on first use
  std::vector<bool> pool_done(pool.size(), false);
  PyRandom rnd(fewshot.seed);

  std::vector<TaskDocument> out;
  out.reserve(n_docs);
  for (std::size_t i = 0; i < n_docs; ++i) {
    const Doc& d = docs[i];
    const Rendered r = render(task, c, d);
    std::string prefix;
    try {
      prefix = c.description.render(d.value);
    } catch (const TemplateError& e) {
      doc_error(task, d, "description", e.what());
    }
    if (k > 0) {
      std::vector<std::string> shots;
      std::vector<std::size_t> picks(draw);
      if (task.fewshot_first_n) {
        for (std::size_t j = 0; j < draw; ++j) picks[j] = j;  // lm-eval's FirstNSampler
      } else {
        picks = rnd.sample(pool.size(), draw);
      }
      for (const std::size_t j : picks) {
        if (pool[j].value == d.value) continue;
        if (shots.size() == k) break;
        if (!pool_done[j]) {
          pool_text[j] = example_text(task, render(task, c, pool[j]));
          pool_done[j] = true;
        }
        shots.push_back(pool_text[j]);
      }
      for (const auto& s : shots) prefix += s + task.fewshot_delimiter;
    }
    TaskDocument td;
    td.doc_id = i;
    td.where = d.where;
    td.doc_json = d.line;
    td.choices = r.choices;
    td.target = r.target;
    if (task.output_type == "multiple_choice") {
      td.gold = r.gold;
      for (const auto& ch : r.choices) {
        if (task.multiple_input) td.requests.push_back({prefix + ch, task.target_delimiter + r.target});
        else td.requests.push_back({prefix + r.text, task.target_delimiter + ch});
      }
    } else if (task.output_type == "loglikelihood") {
      // lm-eval scores doc_to_target as rendered here (LAMBADA's target carries its own space).
      td.requests.push_back({prefix + r.text, r.target});
    } else {
      td.requests.push_back({prefix + r.text, ""});
    }
    out.push_back(std::move(td));
  }
  return out;
}

}  // namespace evalrun
