#include "task/template.hpp"

#include <cctype>
#include <cstddef>
#include <string_view>

namespace evalrun {
namespace {

using json = nlohmann::json;

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

// A recursive-descent reader over one {{...}} expression.
class ExprParser {
 public:
  explicit ExprParser(std::string_view s) : s_(s) {}

  Template::Expr parse() {
    Template::Expr e;
    e.path = path();
    skip_space();
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      e.filters.push_back(filter());
      skip_space();
    }
    if (pos_ != s_.size()) fail("unexpected '" + std::string(s_.substr(pos_)) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError("{{" + std::string(s_) + "}}: " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string ident() {
    skip_space();
    const std::size_t start = pos_;
    while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
    if (start == pos_) fail("expected a name");
    return std::string(s_.substr(start, pos_ - start));
  }
  long long integer() {
    skip_space();
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    const std::size_t digits = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (digits == pos_ || pos_ - digits > 18) fail("expected an integer");
    return std::stoll(std::string(s_.substr(start, pos_ - start)));
  }
  // "text" (no escapes: a task file's quote characters are TOML's business).
  std::string quoted() {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a \"quoted\" argument");
    const std::size_t end = s_.find('"', pos_ + 1);
    if (end == std::string_view::npos) fail("unclosed quote");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  std::vector<Template::Step> path() {
    std::vector<Template::Step> out;
    Template::Step first;
    first.field = ident();
    out.push_back(first);
    for (;;) {
      if (eat('[')) {
        Template::Step st;
        st.kind = Template::Step::kIndex;
        st.index = integer();
        if (!eat(']')) fail("expected ']'");
        out.push_back(st);
      } else if (eat('.')) {
        Template::Step st;
        st.field = ident();
        if (st.field == "index" && eat('(')) {
          st.kind = Template::Step::kIndexOf;
          st.field.clear();
          skip_space();
          if (pos_ < s_.size() && s_[pos_] == '"') st.of_literal = quoted();
          else st.of_path = path();
          if (!eat(')')) fail("expected ')'");
        }
        out.push_back(st);
      } else {
        return out;
      }
    }
  }
  Template::Filter filter() {
    Template::Filter f;
    f.name = ident();
    static const char* const kNoArgs[] = {"trim", "lower", "upper", "capitalize"};
    static const char* const kOneString[] = {"before", "after", "before_last", "after_last"};
    if (eat('(')) {
      skip_space();
      if (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != ')') f.args.emplace_back(integer());
      else if (pos_ < s_.size() && s_[pos_] == '"') f.args.emplace_back(quoted());
      while (eat(',')) {
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == '"') f.args.emplace_back(quoted());
        else f.args.emplace_back(integer());
      }
      if (!eat(')')) fail("expected ')' after the arguments of filter '" + f.name + "'");
    }
    auto all_strings = [&](std::size_t n) {
      if (f.args.size() != n) return false;
      for (const auto& a : f.args)
        if (!a.is_string()) return false;
      return true;
    };
    for (const char* n : kNoArgs)
      if (f.name == n) {
        if (!f.args.empty()) fail("filter '" + f.name + "' takes no arguments");
        return f;
      }
    for (const char* n : kOneString)
      if (f.name == n) {
        if (!all_strings(1)) fail("filter '" + f.name + "' takes one \"quoted\" argument");
        return f;
      }
    if (f.name == "replace") {
      if (!all_strings(2)) fail("filter 'replace' takes two \"quoted\" arguments");
      return f;
    }
    if (f.name == "minus") {
      if (f.args.size() != 1 || !f.args[0].is_number_integer()) fail("filter 'minus' takes one integer");
      return f;
    }
    fail("unknown filter '" + f.name +
         "' (trim, lower, upper, capitalize, replace, before, after, before_last, after_last, minus)");
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

std::string path_text(const std::vector<Template::Step>& path) {
  std::string out;
  for (const auto& st : path) {
    if (st.kind == Template::Step::kField) {
      if (!out.empty()) out += '.';
      out += st.field;
    } else if (st.kind == Template::Step::kIndex) {
      out += '[';
      out += std::to_string(st.index);
      out += ']';
    } else {
      out += ".index(";
      out += st.of_path.empty() ? st.of_literal.dump() : path_text(st.of_path);
      out += ')';
    }
  }
  return out;
}

json lookup(const std::vector<Template::Step>& path, const json& doc) {
  const json* v = &doc;
  json held;  // a computed value (index()) that later steps read
  std::vector<Template::Step> done;
  for (const auto& st : path) {
    std::string at = "the document";
    if (!done.empty()) {
      at = '\'';
      at += path_text(done);
      at += '\'';
    }
    if (st.kind == Template::Step::kField) {
      if (!v->is_object()) throw TemplateError(at + " is " + type_name(*v) + ", it has no field '" + st.field + "'");
      auto it = v->find(st.field);
      if (it == v->end()) {
        throw TemplateError("field '" + (done.empty() ? st.field : path_text(done) + "." + st.field) +
                            "' is missing");
      }
      v = &*it;
    } else if (st.kind == Template::Step::kIndex) {
      if (!v->is_array()) throw TemplateError(at + " is " + type_name(*v) + ", not a list to index");
      const long long n = static_cast<long long>(v->size());
      const long long i = st.index < 0 ? n + st.index : st.index;
      if (i < 0 || i >= n) {
        throw TemplateError("index " + std::to_string(st.index) + " out of range: " + at + " has " +
                            std::to_string(n) + " elements");
      }
      v = &(*v)[static_cast<std::size_t>(i)];
    } else {
      if (!v->is_array()) throw TemplateError(at + " is " + type_name(*v) + ", not a list for index()");
      const json needle = st.of_path.empty() ? st.of_literal : lookup(st.of_path, doc);
      std::size_t i = 0;
      while (i < v->size() && (*v)[i] != needle) ++i;
      if (i == v->size()) throw TemplateError(needle.dump() + " is not in " + at);
      held = json(static_cast<std::int64_t>(i));
      v = &held;
    }
    done.push_back(st);
  }
  return *v;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  std::size_t pos = 0;
  for (std::size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos);
  return out;
}

json apply_filter(const Template::Filter& f, const json& v) {
  if (f.name == "minus") {
    long long n = 0;
    if (v.is_number_integer()) {
      n = v.get<long long>();
    } else if (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>().size() <= 18 &&
               v.get<std::string>().find_first_not_of("0123456789") == std::string::npos) {
      n = std::stoll(v.get<std::string>());
    } else {
      throw TemplateError("filter 'minus' needs an integer, got " + type_name(v));
    }
    return json(n - f.args[0].get<long long>());
  }
  std::string s = value_text(v);
  const std::string a = f.args.empty() ? "" : f.args[0].get<std::string>();
  if (f.name == "trim") {  // Python's str.strip() on ASCII whitespace
    std::size_t b = 0, e = s.size();
    while (b < e && is_space(s[b])) ++b;
    while (e > b && is_space(s[e - 1])) --e;
    return s.substr(b, e - b);
  }
  if (f.name == "lower" || f.name == "upper" || f.name == "capitalize") {  // ASCII letters only
    for (std::size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      const bool up = f.name == "upper" || (f.name == "capitalize" && i == 0);
      s[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
    }
    return s;
  }
  if (f.name == "replace") return replace_all(s, a, f.args[1].get<std::string>());
  // before/after split at the first occurrence, before_last/after_last at the last (Python's
  // s[:s.index(x)], s.split(" ")[-1] ...); a text without the separator is an error, as in Python.
  const bool last = f.name == "before_last" || f.name == "after_last";
  const std::size_t hit = last ? s.rfind(a) : s.find(a);
  if (hit == std::string::npos) throw TemplateError("filter '" + f.name + "': \"" + a + "\" is not in the text");
  if (f.name == "before" || f.name == "before_last") return s.substr(0, hit);
  return s.substr(hit + a.size());
}

}  // namespace

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  throw TemplateError("value is " + type_name(v) + ", expected a string or an integer");
}

Template::Template(const std::string& text) : text_(text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t open = text.find("{{", pos);
    if (open == std::string::npos) {
      parts_.push_back({false, text.substr(pos), {}});
      break;
    }
    if (open > pos) parts_.push_back({false, text.substr(pos, open - pos), {}});
    const std::size_t close = text.find("}}", open + 2);
    if (close == std::string::npos) throw TemplateError("unclosed '{{' at byte " + std::to_string(open));
    std::string inner = text.substr(open + 2, close - open - 2);
    while (!inner.empty() && inner.back() == ' ') inner.pop_back();
    Part p;
    p.is_expr = true;
    p.expr = ExprParser(inner).parse();
    parts_.push_back(std::move(p));
    pos = close + 2;
  }
  for (const auto& p : parts_) {
    if (!p.is_expr && p.literal.find("}}") != std::string::npos) throw TemplateError("'}}' without '{{'");
  }
}

nlohmann::json Template::evaluate(const json& doc) const {
  if (parts_.size() == 1 && parts_[0].is_expr) {
    json v = lookup(parts_[0].expr.path, doc);
    for (const auto& f : parts_[0].expr.filters) v = apply_filter(f, v);
    return v;
  }
  return json(render(doc));
}

std::string Template::render(const json& doc) const {
  std::string out;
  for (const auto& p : parts_) {
    if (!p.is_expr) {
      out += p.literal;
      continue;
    }
    json v = lookup(p.expr.path, doc);
    for (const auto& f : p.expr.filters) v = apply_filter(f, v);
    try {
      out += value_text(v);
    } catch (const TemplateError& e) {
      throw TemplateError("'" + path_text(p.expr.path) + "': " + e.what());
    }
  }
  return out;
}

}  // namespace evalrun
