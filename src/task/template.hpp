// The template syntax of task files (docs/tasks.md, "Templates"): literal text with {{expression}}
// holes, an expression being a field path (a.b, a[0], a[-1], list.index(field) or list.index("x"))
// followed by filters (|trim |lower |upper |capitalize |replace("a","b") |before("_") |after("_")
// |before_last(" ") |after_last(" ") |minus(1)). It covers the Jinja subset lm-evaluation-harness's
// published task YAMLs use, without an interpreter.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace evalrun {

// A template that does not fit a document (missing field, index out of range, wrong type). The caller
// names the task file, the template key and the document.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Template {
 public:
  Template() = default;
  // Throws TemplateError for a syntax error (unclosed {{, unknown filter, bad path).
  explicit Template(const std::string& text);

  // The value of a template that is one {{expression}} and nothing else (it may be a list or an
  // integer: doc_to_choice = "{{choices.text}}"); otherwise the rendered text as a JSON string.
  nlohmann::json evaluate(const nlohmann::json& doc) const;
  // The rendered text; a string or integer value renders as itself, anything else is a TemplateError.
  std::string render(const nlohmann::json& doc) const;

  const std::string& text() const { return text_; }

  struct Filter {
    std::string name;
    std::vector<nlohmann::json> args;
  };
  struct Step {                   // one part of a field path
    enum Kind { kField, kIndex, kIndexOf } kind = kField;
    std::string field;            // kField
    long long index = 0;          // kIndex (negative counts from the end)
    std::vector<Step> of_path;    // kIndexOf: the path whose value is looked up ...
    nlohmann::json of_literal;    // ... or a quoted literal when of_path is empty
  };
  struct Expr {
    std::vector<Step> path;
    std::vector<Filter> filters;
  };

 private:
  struct Part {
    bool is_expr = false;
    std::string literal;
    Expr expr;
  };
  std::string text_;
  std::vector<Part> parts_;
};

// The text a value renders as: a string itself, an integer in decimal; anything else a TemplateError.
std::string value_text(const nlohmann::json& v);

}  // namespace evalrun
