#include "validate/report.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace evalrun {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string limit(const Metric& m) {
  // built by append: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string temporaries
  std::string s;
  if (m.min && m.max) s.append("[").append(num(*m.min)).append(", ").append(num(*m.max)).append("]");
  else if (m.max) s.append("<= ").append(num(*m.max));
  else if (m.min) s.append(">= ").append(num(*m.min));
  return s;
}

std::string verdict(const Metric& m) { return m.checked() ? (m.passed() ? "PASS" : "FAIL") : "info"; }

std::string result_line(const Comparison& c) {
  const auto failed = c.failed_metrics();
  if (failed.empty()) return "RESULT: PASS";
  std::string s = "RESULT: FAIL (";
  for (std::size_t i = 0; i < failed.size(); ++i) s += (i ? ", " : "") + failed[i];
  return s + ")";
}

// Markdown cells must not break the table.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n' || ch == '\r') out += ' ';
    else out += ch;
  }
  return out;
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

std::string render_summary(const Comparison& c, std::size_t worst_rows) {
  std::ostringstream out;
  out << "compare " << c.task << ": reference " << c.reference << " (" << c.reference_dtype << ") vs candidate "
      << c.candidate << " (" << c.candidate_dtype << "), " << c.n_samples << " samples; thresholds: "
      << (c.thresholds_origin.empty() ? "defaults" : c.thresholds_origin) << "\n";
  for (const auto& m : c.metrics) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-22s %14s  %-20s %s\n", m.name.c_str(), num(m.value).c_str(),
                  limit(m).c_str(), verdict(m).c_str());
    out << line;
  }
  for (const auto& n : c.notes) out << "  note: " << n << "\n";
  if (!c.rows.empty() && worst_rows > 0) {
    out << "  worst " << c.rows_title << " (id";
    for (const auto& h : c.sample_columns) out << " | " << h;
    out << "):\n";
    for (std::size_t i = 0; i < std::min(worst_rows, c.rows.size()); ++i) {
      out << "    " << c.rows[i].id;
      for (const auto& v : c.rows[i].cells) out << " | " << v;
      out << "\n";
    }
  }
  out << result_line(c) << "\n";
  return out.str();
}

std::string render_markdown(const Comparison& c, std::size_t max_rows) {
  std::ostringstream out;
  out << "# evalrun compare: " << c.task << "\n\n"
      << "| | file | dtype |\n| --- | --- | --- |\n"
      << "| reference | `" << c.reference << "` | " << c.reference_dtype << " |\n"
      << "| candidate | `" << c.candidate << "` | " << c.candidate_dtype << " |\n\n"
      << c.n_samples << " samples; thresholds: " << (c.thresholds_origin.empty() ? "defaults" : "`" + c.thresholds_origin + "`")
      << "\n\n**" << result_line(c) << "**\n\n## Metrics\n\n"
      << "| metric | value | threshold | result | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& m : c.metrics)
    out << "| " << m.name << " | " << num(m.value) << " | " << limit(m) << " | " << verdict(m) << " | " << cell(m.meaning)
        << " |\n";
  if (!c.notes.empty()) {
    out << "\n## Notes\n\n";
    for (const auto& n : c.notes) out << "- " << n << "\n";
  }
  out << "\n## " << (c.rows_title == "tokens" ? "Tokens" : "Samples") << ", worst first\n\n| id |";
  for (const auto& h : c.sample_columns) out << " " << h << " |";
  out << "\n| --- |";
  for (std::size_t i = 0; i < c.sample_columns.size(); ++i) out << " --- |";
  out << "\n";
  for (std::size_t i = 0; i < std::min(max_rows, c.rows.size()); ++i) {
    out << "| " << cell(c.rows[i].id) << " |";
    for (const auto& v : c.rows[i].cells) out << " " << cell(v) << " |";
    out << "\n";
  }
  if (c.rows.size() > max_rows) out << "\n(" << c.rows.size() - max_rows << " more rows in the JSON report)\n";
  return out.str();
}

std::string render_json(const Comparison& c) {
  nlohmann::json j;
  j["task"] = c.task;
  j["reference"] = {{"path", c.reference}, {"dtype", c.reference_dtype}};
  j["candidate"] = {{"path", c.candidate}, {"dtype", c.candidate_dtype}};
  j["thresholds"] = c.thresholds_origin.empty() ? nlohmann::json("defaults") : nlohmann::json(c.thresholds_origin);
  j["n_samples"] = c.n_samples;
  j["passed"] = c.passed();
  j["failed_metrics"] = c.failed_metrics();
  j["metrics"] = nlohmann::json::array();
  for (const auto& m : c.metrics) {
    nlohmann::json e{{"name", m.name}, {"value", number(m.value)}, {"meaning", m.meaning}};
    if (m.max) e["max"] = *m.max;
    if (m.min) e["min"] = *m.min;
    e["result"] = verdict(m);
    j["metrics"].push_back(e);
  }
  j["notes"] = c.notes;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : c.rows) {
    nlohmann::json e{{"id", r.id}};
    for (std::size_t i = 0; i < c.sample_columns.size() && i < r.cells.size(); ++i) e[c.sample_columns[i]] = r.cells[i];
    rows.push_back(e);
  }
  j[c.rows_title] = rows;
  return j.dump(2) + "\n";
}

}  // namespace evalrun
