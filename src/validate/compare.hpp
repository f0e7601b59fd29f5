// `evalrun compare`: checks that a candidate result file (new hardware, precision, build) answers like
// a reference one of the same task and inputs, metric by metric against thresholds.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "validate/thresholds.hpp"

namespace evalrun {

struct Metric {
  std::string name;
  double value = 0;
  std::optional<double> max;  // passes when value <= max
  std::optional<double> min;  // passes when value >= min
  std::string meaning;
  bool checked() const { return max.has_value() || min.has_value(); }
  bool passed() const;  // unchecked metrics pass; NaN fails a check
};

// One row of the per-sample table (for perplexity: one scored token).
struct SampleRow {
  std::string id;
  std::vector<std::string> cells;  // under Comparison::sample_columns (after the id)
  std::pair<double, double> badness{0, 0};  // rows are listed worst (largest) first
};

struct Comparison {
  std::string task;
  std::string reference, candidate;  // paths
  std::string reference_dtype, candidate_dtype;
  std::string thresholds_origin;  // "" = defaults
  std::size_t n_samples = 0;
  std::vector<Metric> metrics;
  std::vector<std::string> notes;  // what could not be compared and why, how things were compared
  std::string rows_title;          // "samples" or "tokens"
  std::vector<std::string> sample_columns;
  std::vector<SampleRow> rows;  // worst first
  // Per-token values behind a per-token limit, keyed by threshold key (generate: ce_per_token,
  // softmax_diff_per_token), so `evalrun thresholds` can derive limits from their distribution.
  std::map<std::string, std::vector<double>> per_token;
  bool passed() const;
  std::vector<std::string> failed_metrics() const;
};

// Opens both files and compares them. Files that cannot be compared (not result files, other task,
// other samples or inputs) are InputErrors naming the file and the first differing sample.
Comparison compare_results(const std::string& reference, const std::string& candidate, const Thresholds& thresholds);

}  // namespace evalrun
