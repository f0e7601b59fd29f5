#include "app/path_guard.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/errors.hpp"
#include "common/text.hpp"
#include "io/safetensors.hpp"
#include "task/task_file.hpp"

namespace evalrun {
namespace fs = std::filesystem;
namespace {

// What a path is, for comparing two of them.
struct Identity {
  std::string canonical;  // absolute, symlinks and ".." resolved as far as the path exists
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

Identity identify(const std::string& path) {
  Identity id;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  id.canonical = p.string();
  while (id.canonical.size() > 1 && id.canonical.back() == '/') id.canonical.pop_back();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  return id;
}

bool same_file(const Identity& a, const Identity& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return a.canonical == b.canonical;
}

bool inside(const Identity& dir, const Identity& file) {
  return file.canonical == dir.canonical || file.canonical.rfind(dir.canonical + "/", 0) == 0;
}

bool is_model_file(const std::string& name) {
  static const std::set<std::string> names = {
      "config.json",         "generation_config.json",  "quantize_config.json",
      "vocab.json",          "merges.txt",              "tokenizer.json",       "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",   "tokenizer.model",      "vocab.txt"};
  return names.count(name) > 0 || is_weight_file(name);
}

}  // namespace

void PathGuard::input(const std::string& key, const std::string& path) {
  if (!path.empty()) entries_.push_back({key, path, Role::input});
}

void PathGuard::dataset(const std::string& key, const std::string& spec) {
  if (spec.empty()) return;
  std::error_code ec;
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    if (::glob(spec.c_str(), 0, nullptr, &g) == 0) {
      for (std::size_t i = 0; i < g.gl_pathc; ++i) {
        if (fs::is_regular_file(g.gl_pathv[i], ec)) input(key, g.gl_pathv[i]);
      }
    }
    ::globfree(&g);
  } else if (fs::is_directory(spec, ec)) {
    for (const auto& e : fs::directory_iterator(spec, ec)) {
      if (e.is_regular_file(ec) && e.path().extension() == ".txt") input(key, e.path().string());
    }
  } else {
    input(key, spec);
  }
}

void PathGuard::model_dir(const std::string& key, const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return;  // the loader names a missing directory
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && is_model_file(e.path().filename().string())) input(key, e.path().string());
  }
}

void PathGuard::output(const std::string& key, const std::string& path) {
  if (!path.empty()) entries_.push_back({key, path, Role::output});
}

void PathGuard::output_dir(const std::string& key, const std::string& path, bool must_be_directory) {
  if (!path.empty()) entries_.push_back({key, path, Role::output_dir, must_be_directory});
}

void PathGuard::check() const {
  std::vector<Identity> ids;
  for (const auto& e : entries_) ids.push_back(identify(e.path));
  auto where = [&](const Entry& e) { return where_ + e.key; };
  auto also = [&](const Entry& e) {
    std::string s = e.key;
    return s.append(1, ' ').append(quote_short(e.path));  // append: GCC 12 -Wrestrict misfires on " " + s
  };
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& o = entries_[i];
    std::error_code ec;
    if (o.role == Role::input) {
      if (fs::is_directory(o.path, ec)) throw InputError(where(o), quote_short(o.path) + " is a directory, expected a file");
      continue;
    }
    if (o.role == Role::output && fs::is_directory(o.path, ec)) {
      throw InputError(where(o), quote_short(o.path) + " is a directory, expected a file");
    }
    if (o.role == Role::output_dir && o.must_be_directory && ids[i].exists && !fs::is_directory(o.path, ec)) {
      throw InputError(where(o), quote_short(o.path) + " exists and is not a directory");
    }
    for (std::size_t j = 0; j < entries_.size(); ++j) {
      const Entry& x = entries_[j];
      if (j == i) continue;
      if (o.role == Role::output && x.role == Role::input && same_file(ids[i], ids[j])) {
        throw InputError(where(o), quote_short(o.path) + " is also " + also(x) +
                                       ", which this command reads: an output never replaces an input");
      }
      if (o.role == Role::output && x.role == Role::output && j < i && same_file(ids[i], ids[j])) {
        throw InputError(where(o), quote_short(o.path) + " is also " + also(x) + ": two outputs cannot share a file");
      }
      if (o.role == Role::output_dir && x.role == Role::input && inside(ids[i], ids[j])) {
        throw InputError(where(o), quote_short(o.path) + " would hold " + also(x) +
                                       ", which this command reads: an output never replaces an input");
      }
    }
  }
}

void check_run_paths(const RunSpec& spec) {
  PathGuard g(spec.config_path + ": ");
  g.input("the config file", spec.config_path);
  g.model_dir("model.path", spec.model.path);
  if (spec.model.tokenizer != spec.model.path) g.model_dir("model.tokenizer", spec.model.tokenizer);
  // Only generation reads a directory or glob of prompt files; the other tasks read one file.
  const bool many = spec.task.kind == TaskKind::generate;
  const auto data = [&](const char* key, const std::string& value) { many ? g.dataset(key, value) : g.input(key, value); };
  if (spec.task.prompt_set.empty()) data("task.dataset", spec.task.dataset);
  if (task_info(spec.task.kind).task_file != TaskFileUse::none && !spec.task.task_file.empty()) {
    // The task file and the data sets it names (its own documents unless task.dataset is set, its
    // few-shot file) are inputs too.
    g.input("task.task_file", spec.task.task_file);
    const TaskFile task = read_task_file(spec.task.task_file);
    if (spec.task.dataset.empty()) g.input(spec.task.task_file + ": dataset", task.dataset);
    g.input(spec.task.task_file + ": fewshot_dataset", task.fewshot_dataset);
  }
  data("quantization.calibration_dataset", spec.quantization.calibration_dataset);
  g.input("validation.golden", spec.validation.golden);
  g.output("output.path", spec.output.path);
  g.output("output.predictions_json", spec.output.predictions_json);
  g.output("output.lm_eval_json", spec.output.lm_eval_json);
  g.output("output.samples_jsonl", spec.output.samples_jsonl);
  // What may already be there is the journal's own business (resume/run_journal.cpp).
  g.output_dir("the journal directory", spec.output.path + ".journal", false);
  g.check();
}

void add_batch_paths(PathGuard& g, const BatchSpec& spec, const std::string& jobs, const std::string& outputs,
                     const std::string& reports, bool results_are_inputs) {
  g.input("the jobs file", jobs);
  for (std::size_t i = 0; i < spec.runs.size(); ++i) {
    const BatchRun& r = spec.runs[i];
    const std::string run = jobs + ": run #" + std::to_string(i + 1) + " ";
    g.input(run + "config", r.config);
    g.input(run + "reference", r.reference);
    g.input(run + "thresholds", r.thresholds);
    if (!outputs.empty()) {
      const fs::path base = fs::path(outputs) / batch_result_name(i);
      if (results_are_inputs) g.input("--outputs", base.string() + ".h5");
      else g.output("--outputs", base.string() + ".h5");
      g.output("--outputs", base.string() + ".log");
    }
    if (!reports.empty()) {
      const fs::path base = fs::path(reports) / batch_report_stem(r.name, i);
      for (const char* ext : {".md", ".json", ".html"}) g.output("--reports", base.string() + ext);
    }
  }
}

}  // namespace evalrun
