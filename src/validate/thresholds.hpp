// Pass/fail limits of `evalrun compare`, per task, with defaults for "the same model at another
// precision or on other hardware" and an optional TOML file that overrides some of them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace evalrun {

struct ThresholdSpec {
  std::string task;  // section of the thresholds file: generate, qa, mlm, perplexity
  std::string key;
  double default_value;
  bool is_minimum;  // true: the metric must be >= the value; false: <= the value
  std::string meaning;
};

// Every known key, in the order the reports list them.
const std::vector<ThresholdSpec>& threshold_specs();

class Thresholds {
 public:
  Thresholds();  // all defaults
  // Reads a TOML file of [task] tables of numbers; unknown sections or keys, non-numbers and negative
  // values are InputErrors naming file:line.
  static Thresholds load(const std::string& path);

  double get(const std::string& task, const std::string& key) const;  // throws std::out_of_range if unknown
  void set(const std::string& task, const std::string& key, double value);
  const std::string& origin() const { return origin_; }  // file path, "" for the defaults

 private:
  std::map<std::string, double> values_;  // "task.key" -> value
  std::string origin_;
};

// Markdown table of every key, its default and meaning (for --help and the README).
std::string describe_thresholds();

}  // namespace evalrun
