#include "app/compare_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "app/command_line.hpp"
#include "app/path_guard.hpp"
#include "app/report_assets.hpp"
#include "common/errors.hpp"
#include "io/text_file.hpp"
#include "validate/compare.hpp"
#include "validate/report.hpp"
#include "validate/thresholds.hpp"

namespace evalrun {
namespace {

void write_text(const std::string& path, const std::string& text) { write_text_file(path, text, "the report"); }

}  // namespace

int compare_command(int argc, char** argv) {
  CLI::App app{"Check that a candidate result file answers like a reference one (same task and inputs: other "
               "hardware, precision or build). Exit 0 when every threshold holds, 1 when one fails, 2 on bad input.\n\n"
               "Thresholds (defaults; override any in a TOML file of [task] tables):\n" +
                   describe_thresholds(),
               "evalrun compare"};
  std::string reference, candidate, thresholds_path, report, json, html;
  app.add_option("reference", reference, "reference result file (.h5)")->required();
  app.add_option("candidate", candidate, "candidate result file (.h5)")->required();
  app.add_option("--thresholds", thresholds_path, "TOML file overriding thresholds, e.g. [qa] max_logit_diff = 1e-3");
  app.add_option("--report", report, "write a Markdown report here");
  app.add_option("--json", json, "write a JSON report here");
  app.add_option("--html", html, "write a self-contained HTML report with plots here (open it in a browser)");
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  PathGuard guard;
  guard.input("the reference", reference);
  guard.input("the candidate", candidate);
  guard.input("--thresholds", thresholds_path);
  guard.output("--report", report);
  guard.output("--json", json);
  guard.output("--html", html);
  guard.check();
  const Thresholds thresholds = thresholds_path.empty() ? Thresholds() : Thresholds::load(thresholds_path);
  const std::string plotly = html.empty() ? std::string() : load_plotly_js("--html");  // fail before the work
  const Comparison c = compare_results(reference, candidate, thresholds);
  if (!html.empty()) write_text(html, render_html(c, plotly));
  if (!report.empty()) write_text(report, render_markdown(c));
  if (!json.empty()) write_text(json, render_json(c));
  std::fputs(render_summary(c).c_str(), stdout);
  return c.passed() ? kExitOk : kExitFailed;
}

}  // namespace evalrun
