// `evalrun quantize`: the run config's model, task and [quantization] section (method = "int8",
// direct = true) decide everything, so the checkpoint written equals what a run with that config does
// in memory: same calibration inputs (the task's own preprocessing), same statistics, same layers.
//
// The output directory holds model.safetensors (the INT8 layers in the format of quant/int8.hpp and
// every other tensor of the source checkpoint unchanged), config.json with "quantization_config"
// (every setting, the smoothed layers, the calibration data set and sample count) and the other
// files of the source directory (tokenizer, generation config). It is written into a temporary
// directory beside it and renamed at the end: an existing directory is never touched, a failure
// leaves nothing.
#include "app/quantize_command.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "app/command_line.hpp"
#include "app/direct_quant.hpp"
#include "app/flows/flows.hpp"
#include "app/path_guard.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "config/config.hpp"
#include "io/safetensors.hpp"
#include "model/loader_util.hpp"
#include "model/registry.hpp"
#include "quant/quant_config.hpp"
#include "task/registry.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;

// Every tensor of the source checkpoint except the float layers that were quantized, then the
// quantized layers' own tensors.
std::vector<TensorToWrite> output_tensors(const std::string& source, const std::vector<quant::QuantizedSite>& sites) {
  std::set<std::string> replaced;
  for (const auto& site : sites) {
    for (const auto& p : site.prefixes) {
      replaced.insert(p + ".weight");
      replaced.insert(p + ".bias");
    }
  }
  std::vector<TensorToWrite> out;
  copy_tensors_except(Checkpoint(source), replaced, out);
  for (const auto& site : sites) {
    for (std::size_t i = 0; i < site.parts.size(); ++i) site.parts[i]->export_tensors(site.prefixes[i], out);
  }
  return out;
}

void write_checkpoint(const std::string& source, const std::string& dir, const std::vector<quant::QuantizedSite>& sites,
                      const quant::Int8Settings& settings) {
  write_safetensors((fs::path(dir) / "model.safetensors").string(), output_tensors(source, sites));
  nlohmann::json config = model::read_config_json((fs::path(source) / "config.json").string());
  config["quantization_config"] = settings.to_json();
  std::ofstream(fs::path(dir) / "config.json") << config.dump(2) << "\n";
  // Tokenizer and generation files travel along; the source's weights and settings do not.
  for (const auto& e : fs::directory_iterator(source)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || is_weight_file(name) || name == "config.json" || name == "quantize_config.json") continue;
    fs::copy_file(e.path(), fs::path(dir) / name);
  }
}

}  // namespace

int quantize_command(int argc, char** argv) {
  CLI::App app{"Quantize a float checkpoint to INT8 W8A8 as a run with [quantization] direct = true would, and\n"
               "write it as a checkpoint that runs with quantization.method = \"int8\" (or \"auto\").\n"
               "CONFIG is a run config: model.path is the float checkpoint; task.kind, the data set and its\n"
               "preprocessing prepare the calibration inputs; [quantization] needs method = \"int8\",\n"
               "direct = true and takes weights, activations, smoothquant, smoothquant_alpha,\n"
               "calibration_dataset and calibration_samples (--set overrides any key).",
               "evalrun quantize"};
  std::string config, out;
  std::vector<std::string> overrides;
  bool verbose = false;
  app.add_option("config", config, "TOML run config")->required();
  app.add_option("--out", out, "checkpoint directory to write (must not exist)")->required();
  app.add_option("--set", overrides, "override a config key: section.key=value (repeatable)");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  init_logging(0, 1, verbose);
  const RunSpec spec = load_run_spec(config, overrides);
  if (spec.quantization.method != "int8" || !spec.quantization.direct) {
    throw InputError(spec.config_path + ": quantization",
                     "evalrun quantize needs method = \"int8\" and direct = true under [quantization] (the settings "
                     "of the direct quantization to write)");
  }
  {
    PathGuard guard(spec.config_path + ": ");
    guard.input("the config file", spec.config_path);
    guard.model_dir("model.path", spec.model.path);
    guard.dataset("task.dataset", spec.task.dataset);
    guard.dataset("quantization.calibration_dataset", spec.quantization.calibration_dataset);
    guard.output_dir("--out", out);
    guard.check();
  }
  require_float_checkpoint(spec);
  if (fs::exists(out)) throw InputError("--out " + out, "already exists (evalrun quantize never overwrites a directory)");
  const int threads = spec.run.threads > 0 ? spec.run.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  set_compute_threads(threads);

  const CalibrationSet calibration = task_calibration(spec);
  auto model = load_model({spec.model.path, spec.model.dtype, "cpu", "none"}, task_info(spec.task.kind).role);
  quant::Int8Settings settings = direct_int8_settings(spec);
  std::vector<quant::QuantizedSite> sites = quantize_int8(*model, calibration, settings);

  const fs::path target = fs::absolute(out);
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::create_directories(target.parent_path());
  fs::remove_all(tmp);
  fs::create_directory(tmp);
  try {
    write_checkpoint(spec.model.path, tmp.string(), sites, settings);
    fs::rename(tmp, target);  // fails (rather than replacing) if the target appeared meanwhile and is not empty
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  std::size_t layers = 0, bytes = 0;
  for (const auto& s : sites) {
    for (const auto& p : s.parts) {
      ++layers;
      bytes += p->resident_bytes();
    }
  }
  std::printf("wrote %s: %zu layers quantized (%s), %.2f MiB of int8 layers\n", out.c_str(), layers,
              settings.describe().c_str(), static_cast<double>(bytes) / (1 << 20));
  return kExitOk;
}

}  // namespace evalrun
