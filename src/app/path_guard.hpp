// Every command lists the files it will read and write before it does any work, and refuses (InputError,
// exit 2, naming both keys or arguments) an output that is one of its inputs, an output that is another
// output, and an output that is an existing directory. Paths are compared by identity, not spelling:
// std::filesystem::weakly_canonical (symlinks, "..", relative paths) and, for files that exist, device and
// inode (hard links). An output inside a model or data set directory is fine unless it is one of the
// files read there.
#pragma once

#include <string>
#include <vector>

#include "app/batch_command.hpp"
#include "config/run_spec.hpp"

namespace evalrun {

class PathGuard {
 public:
  // `where` prefixes every message's place (a config file: "cfg.toml: "); keys name the value or argument.
  explicit PathGuard(std::string where = "") : where_(std::move(where)) {}

  // A file the command reads. Missing files are left to their readers.
  void input(const std::string& key, const std::string& path);
  // The files a task.dataset-style value names: the file, every file a glob matches, the *.txt files of
  // a directory (as io/prompts.hpp reads them).
  void dataset(const std::string& key, const std::string& spec);
  // The files of a Hugging Face directory that evalrun reads: config.json, generation_config.json,
  // quantize_config.json, *.safetensors and their index, the tokenizer files.
  void model_dir(const std::string& key, const std::string& dir);
  // A file the command writes (replacing it where it exists).
  void output(const std::string& key, const std::string& path);
  // A directory the command fills and may remove again: no input may lie inside it. With
  // `must_be_directory`, an existing non-directory there is refused too.
  void output_dir(const std::string& key, const std::string& path, bool must_be_directory = true);

  // The checks; the first problem is an InputError.
  void check() const;

 private:
  enum class Role { input, output, output_dir };
  struct Entry {
    std::string key, path;
    Role role;
    bool must_be_directory = false;
  };
  std::string where_;
  std::vector<Entry> entries_;
};

// The files of a run: the config file, model.path and model.tokenizer, task.dataset,
// quantization.calibration_dataset, validation.golden; output.path, output.predictions_json and the
// journal directory <output.path>.journal/. Checked on rank 0 before the run starts.
void check_run_paths(const RunSpec& spec);

// A jobs file's inputs (the file, each run's config, reference and thresholds) and the files a batch
// writes: in `outputs` each run's runN.h5 (an input instead when `results_are_inputs`, for
// --compare-only) and runN.log; in `reports` NAME.md, NAME.json and NAME.html. "" = not written.
void add_batch_paths(PathGuard& guard, const BatchSpec& spec, const std::string& jobs, const std::string& outputs,
                     const std::string& reports, bool results_are_inputs);

}  // namespace evalrun
