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

namespace {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// JSON text that is safe inside <script>: no "</" can close the element early.
std::string script_json(const nlohmann::json& j) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The data the page's plots are drawn from.
nlohmann::json plot_data(const Comparison& c) {
  nlohmann::json j;
  const auto& p = c.by_position;
  if (!p.position.empty()) {
    j["by_position"] = {{"position", p.position},
                        {"compared", p.compared},
                        {"failure_rate", p.failure_rate},
                        {"ce_mean", p.ce_mean},
                        {"ce_excess_mean", p.ce_excess_mean}};
  }
  j["histograms"] = nlohmann::json::array();
  for (const auto& h : c.histograms) {
    j["histograms"].push_back({{"title", h.title},
                               {"edges", h.log10_edges},
                               {"counts", h.counts},
                               {"zeros", h.zeros},
                               {"non_finite", h.non_finite}});
  }
  return j;
}

// Draws every plot into #plots with Plotly and reports how many it drew on <body>.
constexpr const char* kPlotScript = R"JS(
(function () {
  const data = JSON.parse(document.getElementById('plot-data').textContent);
  const root = document.getElementById('plots');
  const layout = (title, xtitle, ytitle) => ({
    title: { text: title, font: { size: 15 } }, margin: { t: 50, l: 60, r: 20, b: 50 },
    xaxis: { title: { text: xtitle } }, yaxis: { title: { text: ytitle } }, height: 340 });
  const config = { displaylogo: false, responsive: true };
  let drawn = 0;
  function add(traces, lay) {
    const div = document.createElement('div');
    div.className = 'plot';
    root.appendChild(div);
    Plotly.newPlot(div, traces, lay, config);
    drawn += 1;
  }
  const p = data.by_position;
  if (p) {
    const rate = layout('Failure rate by token position', 'generated token position', 'share of tokens over a limit');
    rate.yaxis.range = [0, Math.max(0.05, 1.1 * Math.max(...p.failure_rate))];
    add([{ type: 'bar', x: p.position, y: p.failure_rate, name: 'failure rate',
           customdata: p.compared, hovertemplate: 'step %{x}: %{y:.3f} of %{customdata} tokens<extra></extra>' }], rate);
    add([{ type: 'scatter', mode: 'lines+markers', x: p.position, y: p.ce_mean, name: 'cross entropy' },
         { type: 'scatter', mode: 'lines+markers', x: p.position, y: p.ce_excess_mean, name: 'CE - H(ref)' }],
        layout('Cross entropy by token position (mean over samples)', 'generated token position', 'nats'));
  }
  for (const h of data.histograms) {
    if (h.counts.length === 0) {
      const note = document.createElement('p');
      note.textContent = h.title + ': all ' + (h.zeros + h.non_finite) + ' values are exactly 0' +
        (h.non_finite ? ' or not finite' : '') + ', nothing to plot.';
      root.appendChild(note);
      continue;
    }
    const centers = h.counts.map((_, i) => (h.edges[i] + h.edges[i + 1]) / 2);
    const width = h.edges[1] - h.edges[0];
    // Ticks at 1, 2 and 5 times each power of ten inside the range (only the powers when there are many).
    const lo = h.edges[0], hi = h.edges[h.edges.length - 1];
    const steps = hi - lo > 4 ? [1] : [1, 2, 5];
    const ticks = [];
    for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
      for (const m of steps) {
        const t = e + Math.log10(m);
        if (t >= lo - 1e-9 && t <= hi + 1e-9) ticks.push(t);
      }
    }
    const extra = [];
    if (h.zeros) extra.push(h.zeros + ' exactly 0');
    if (h.non_finite) extra.push(h.non_finite + ' not finite');
    const lay = layout(h.title + (extra.length ? ' (not shown: ' + extra.join(', ') + ')' : ''), '|difference|', 'count');
    lay.xaxis.tickvals = ticks;
    lay.xaxis.ticktext = ticks.map(t => Number(Math.pow(10, t).toPrecision(1)).toExponential(0));
    lay.bargap = 0.05;
    add([{ type: 'bar', x: centers, y: h.counts, width: width,
           customdata: h.counts.map((_, i) => [Math.pow(10, h.edges[i]), Math.pow(10, h.edges[i + 1])]),
           hovertemplate: '[%{customdata[0]:.3g}, %{customdata[1]:.3g}): %{y}<extra></extra>' }], lay);
  }
  document.body.setAttribute('data-plots-rendered', String(drawn));
})();
)JS";

constexpr const char* kStyle = R"CSS(
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
.verdict { padding: 2px 10px; border-radius: 4px; color: #fff; }
.pass { background: #2e7d32; } .fail { background: #c62828; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.FAIL { color: #c62828; font-weight: bold; } td.PASS { color: #2e7d32; }
.plot { width: 100%; min-height: 340px; margin-bottom: 12px; }
)CSS";

}  // namespace

std::string render_html(const Comparison& c, const std::string& plotly_js, std::size_t max_rows) {
  const bool ok = c.passed();
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>evalrun compare: "
    << html_escape(c.task) << " " << (ok ? "PASS" : "FAIL") << "</title>\n<style>" << kStyle << "</style>\n"
    << "<script>" << plotly_js << "</script>\n</head>\n<body>\n";
  o << "<h1>evalrun compare (" << html_escape(c.task) << "): <span class=\"verdict " << (ok ? "pass" : "fail")
    << "\" id=\"verdict\">" << html_escape(result_line(c).substr(8)) << "</span></h1>\n";
  o << "<table>\n<tr><th>reference</th><td>" << html_escape(c.reference) << "</td><td>dtype "
    << html_escape(c.reference_dtype) << "</td></tr>\n<tr><th>candidate</th><td>" << html_escape(c.candidate)
    << "</td><td>dtype " << html_escape(c.candidate_dtype) << "</td></tr>\n<tr><th>thresholds</th><td colspan=\"2\">"
    << html_escape(c.thresholds_origin.empty() ? "defaults" : c.thresholds_origin) << "</td></tr>\n<tr><th>"
    << html_escape(c.rows_title) << "</th><td colspan=\"2\">" << c.rows.size() << "</td></tr>\n</table>\n";

  o << "<h2>Metrics</h2>\n<table id=\"metrics\">\n<tr><th>metric</th><th>value</th><th>limit</th><th>result</th>"
       "<th>meaning</th></tr>\n";
  for (const auto& m : c.metrics) {
    const std::string v = verdict(m);
    o << "<tr><td>" << html_escape(m.name) << "</td><td>" << num(m.value) << "</td><td>" << html_escape(limit(m))
      << "</td><td class=\"" << v << "\">" << v << "</td><td>" << html_escape(m.meaning) << "</td></tr>\n";
  }
  o << "</table>\n";
  if (!c.notes.empty()) {
    o << "<h2>Notes</h2>\n<ul>\n";
    for (const auto& n : c.notes) o << "<li>" << html_escape(n) << "</li>\n";
    o << "</ul>\n";
  }
  o << "<h2>Plots</h2>\n<div id=\"plots\"></div>\n";

  o << "<h2>" << html_escape(c.rows_title) << " (worst first";
  if (c.rows.size() > max_rows) o << "; " << max_rows << " of " << c.rows.size() << " shown";
  o << ")</h2>\n<table id=\"rows\">\n<tr><th>id</th>";
  for (const auto& col : c.sample_columns) o << "<th>" << html_escape(col) << "</th>";
  o << "</tr>\n";
  for (std::size_t i = 0; i < c.rows.size() && i < max_rows; ++i) {
    o << "<tr><td>" << html_escape(c.rows[i].id) << "</td>";
    for (const auto& cell_text : c.rows[i].cells) o << "<td>" << html_escape(cell_text) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
  o << "<script type=\"application/json\" id=\"plot-data\">" << script_json(plot_data(c)) << "</script>\n";
  o << "<script>" << kPlotScript << "</script>\n</body>\n</html>\n";
  return o.str();
}

}  // namespace evalrun
