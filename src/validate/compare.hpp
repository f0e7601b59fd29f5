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

// A histogram of non-negative differences on a log10 scale (they span many magnitudes); exact zeros
// are counted apart, since they have no logarithm and identical runs give nothing else.
struct DiffHistogram {
  std::string title;              // "|start/end logit difference|"
  std::vector<double> log10_edges;  // bins [edges[i], edges[i+1]) of log10(|diff|)
  std::vector<std::size_t> counts;
  std::size_t zeros = 0;
  std::size_t non_finite = 0;
  std::size_t total() const;
  // The histogram of `values` (|diff| >= 0), as DiffHistogramBuilder bins them.
  static DiffHistogram of(const std::string& title, const std::vector<double>& values);
};

// Counts differences one at a time into fixed bins an eighth of a decade wide (edges at multiples of
// 1/8 in log10), so a histogram of every vocabulary logit of a run needs no copy of the values and does
// not depend on the order they come in; histogram() spans the bins from the smallest to the largest
// non-zero value.
class DiffHistogramBuilder {
 public:
  static constexpr int kBinsPerDecade = 8;
  explicit DiffHistogramBuilder(std::string title);
  void add(double v);
  DiffHistogram histogram() const;

 private:
  std::string title_;
  std::vector<std::size_t> counts_;  // index = floor(log10 |v| * kBinsPerDecade) - kLowest
  std::size_t zeros_ = 0, non_finite_ = 0;
};

// generate, level 1: the compared steps grouped by their index in the generated sequence.
struct PositionSeries {
  std::vector<std::size_t> position;     // step index (0 = first generated token)
  std::vector<std::size_t> compared;     // steps compared at that index (over all samples)
  std::vector<double> failure_rate;      // share of them over a per-token limit
  std::vector<double> ce_mean;           // mean cross entropy -sum p_ref log p_cand
  std::vector<double> ce_excess_mean;    // mean CE - H(ref)
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
  // Behind the HTML report's plots.
  std::vector<DiffHistogram> histograms;
  PositionSeries by_position;  // generate level 1 only; empty otherwise
  bool passed() const;
  std::vector<std::string> failed_metrics() const;
};

// Opens both files and compares them. Files that cannot be compared (not result files, other task,
// other samples or inputs) are InputErrors naming the file and the first differing sample.
Comparison compare_results(const std::string& reference, const std::string& candidate, const Thresholds& thresholds);

}  // namespace evalrun
