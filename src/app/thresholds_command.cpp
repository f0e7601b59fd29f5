#include "app/thresholds_command.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/command_line.hpp"
#include "app/path_guard.hpp"
#include "common/errors.hpp"
#include "io/text_file.hpp"
#include "validate/compare.hpp"
#include "validate/divergence.hpp"
#include "validate/thresholds.hpp"

namespace evalrun {
namespace {

// The metric a threshold key checks: the key without its "_min" suffix (answer_agreement_min ->
// answer_agreement); perplexity.ratio_max checks perplexity_ratio.
std::string metric_of(const ThresholdSpec& s) {
  if (s.task == "perplexity" && s.key == "ratio_max") return "perplexity_ratio";
  const std::string suffix = "_min";
  if (s.is_minimum && s.key.size() > suffix.size() && s.key.ends_with(suffix))
    return s.key.substr(0, s.key.size() - suffix.size());
  return s.key;
}

bool is_per_token(const ThresholdSpec& s) { return s.key.ends_with("_per_token"); }

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // TOML needs a float to look like one
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::vector<double> finite(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v)
    if (std::isfinite(x)) out.push_back(x);
  return out;
}

}  // namespace

int thresholds_command(int argc, char** argv) {
  CLI::App app{"Derive compare thresholds from several runs against one reference: each metric's percentile over "
               "the runs (per-token limits: over every token of every run) times a margin. Maximum limits become "
               "percentile * margin; minimum limits (agreement shares) 1 - (1 - low percentile) * margin; "
               "perplexity.ratio_max 1 + (max(r, 1/r) - 1) * margin. Writes only the reference task's section.",
               "evalrun thresholds"};
  std::string reference, out;
  std::vector<std::string> runs;
  double pct = 99, margin = 1.5;
  app.add_option("reference", reference, "reference result file (.h5)")->required();
  app.add_option("runs", runs, "result files of the same task and inputs, compared with the reference")->required();
  app.add_option("--out", out, "thresholds TOML file to write")->required();
  app.add_option("--percentile", pct, "percentile of each metric over the runs (0..100)")->check(CLI::Range(0.0, 100.0));
  app.add_option("--margin", margin, "factor (>= 1) applied to each derived limit's distance from a perfect match")
      ->check(CLI::Range(1.0, 1e9));
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;

  PathGuard guard;
  guard.input("the reference", reference);
  for (const auto& run : runs) guard.input("the run", run);
  guard.output("--out", out);
  guard.check();

  // Pass 1 (default limits): per-run metrics and the pooled per-token values.
  std::string task;
  std::map<std::string, std::vector<double>> per_token;
  for (const auto& run : runs) {
    const Comparison c = compare_results(reference, run, Thresholds());
    task = c.task;
    for (const auto& [key, values] : c.per_token)
      per_token[key].insert(per_token[key].end(), values.begin(), values.end());
  }
  // Per-token limits first: failure_rate counts tokens over them, so pass 2 measures it with them.
  Thresholds derived;
  std::map<std::string, std::string> lines;  // key -> "key = value  # how"
  for (const auto& s : threshold_specs()) {
    if (s.task != task || !is_per_token(s)) continue;
    const auto v = finite(per_token[s.key]);
    if (v.empty()) continue;
    const double limit = percentile(v, pct) * margin;
    derived.set(task, s.key, limit);
    lines[s.key] = s.key + " = " + num(limit) + "  # p" + fmt(pct) + " of " + std::to_string(v.size()) +
                   " tokens = " + fmt(percentile(v, pct)) + ", max " + fmt(*std::max_element(v.begin(), v.end()));
  }
  std::map<std::string, std::vector<double>> values;  // metric name -> one value per run
  for (const auto& run : runs) {
    const Comparison c = compare_results(reference, run, derived);
    for (const auto& m : c.metrics) values[m.name].push_back(m.value);
  }
  for (const auto& s : threshold_specs()) {
    if (s.task != task || is_per_token(s)) continue;
    const auto v = finite(values[metric_of(s)]);
    if (v.empty()) continue;  // not measured (e.g. no logits): the default applies
    double limit;
    std::string how;
    if (s.key == "ratio_max" && s.task == "perplexity") {
      std::vector<double> dev;
      for (double r : v) dev.push_back(r > 0 ? std::max(r, 1 / r) : INFINITY);
      const double p = percentile(dev, pct);
      limit = 1 + (p - 1) * margin;
      how = "p" + fmt(pct) + " of max(r, 1/r) = " + fmt(p);
    } else if (s.is_minimum) {
      const double p = percentile(v, 100 - pct);
      limit = std::max(0.0, 1 - (1 - p) * margin);
      how = "p" + fmt(100 - pct) + " = " + fmt(p);
    } else {
      const double p = percentile(v, pct);
      limit = std::max(0.0, p * margin);
      how = "p" + fmt(pct) + " = " + fmt(p);
    }
    if (!std::isfinite(limit)) continue;
    lines[s.key] = s.key + " = " + num(limit) + "  # " + how + ", max " + fmt(*std::max_element(v.begin(), v.end()));
  }

  std::ostringstream text;
  text << "# Thresholds for `evalrun compare`, written by `evalrun thresholds`.\n"
       << "# Derived from " << runs.size() << " run(s) against the reference " << reference << ":\n";
  for (const auto& r : runs) text << "#   " << r << "\n";
  text << "# Each limit: the " << fmt(pct) << "th percentile of the metric over the runs (per-token limits: over every\n"
       << "# compared token) times a margin of " << fmt(margin)
       << " (minimum limits: 1 - (1 - low percentile) * margin). Keys\n"
       << "# not listed were not measured and keep their defaults.\n"
       << "[" << task << "]\n";
  for (const auto& s : threshold_specs())
    if (s.task == task && lines.count(s.key)) text << lines[s.key] << "\n";
  write_text_file(out, text.str(), "the thresholds file");
  std::fputs(text.str().c_str(), stdout);
  return kExitOk;
}

}  // namespace evalrun
