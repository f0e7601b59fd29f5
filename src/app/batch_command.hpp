// `evalrun batch JOBS.toml`: runs a list of evaluations (config + overrides, optionally under mpirun),
// compares each result with its reference and prints one summary table. Exit 0 when every run passes,
// 1 when one fails, 2 on a bad jobs file or input.
#pragma once

#include <string>
#include <vector>

namespace evalrun {

struct BatchRun {
  std::string name;        // label in the table: `name`, else the config's file stem (+ overrides)
  std::string config;      // paths as written (relative to the current directory, like configs)
  std::vector<std::string> overrides;
  std::string reference;
  std::string thresholds;  // "" = defaults
};

struct BatchSpec {
  std::string name;
  int ranks = 0;  // 0: run each config directly; N: under `mpirun -n N`
  std::vector<BatchRun> runs;
};

// Strict: unknown sections or keys, wrong types, missing required keys, missing files and bad
// thresholds files are InputErrors naming file:line and key.
BatchSpec load_batch_spec(const std::string& path);

int batch_command(int argc, char** argv);

// Where a batch puts run `index` (0-based): <outputs>/runN.h5 and runN.log, <reports>/STEM.md, .json, .html.
std::string batch_result_name(std::size_t index);                           // "run3"
std::string batch_report_stem(const std::string& name, std::size_t index);  // "03-tiny-qa"

// The absolute path of the running evalrun binary (for child processes and generated job scripts).
std::string self_exe();

}  // namespace evalrun
