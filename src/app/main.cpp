// evalrun command line: run (default), inspect, compare, thresholds, batch, make-model, quantize, tokenize, help-config.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "app/command_line.hpp"
#include "app/batch_command.hpp"
#include "app/submit_command.hpp"
#include "app/compare_command.hpp"
#include "app/dry_run.hpp"
#include "app/inspect_command.hpp"
#include "app/make_model_command.hpp"
#include "app/path_guard.hpp"
#include "app/quantize_command.hpp"
#include "app/run_command.hpp"
#include "app/thresholds_command.hpp"
#include "app/tokenize_command.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "config/config.hpp"
#include "dist/mpi_world.hpp"
#include "io/hdf5_file.hpp"

namespace {

const char* kUsage = R"(evalrun: distributed batch evaluation of transformer models

Usage:
  evalrun CONFIG.toml [--set section.key=value ...] [-v]   run (same as `evalrun run ...`)
  evalrun CONFIG.toml --dry-run                              validate and print each rank's plan; run nothing
  mpirun -n 4 evalrun CONFIG.toml                            the same on 4 data-parallel ranks
  evalrun CONFIG.toml --resume                               continue an interrupted run from its journal
  evalrun inspect RESULT.h5                                  summary of a result file
  evalrun compare REF.h5 CAND.h5 [--thresholds T.toml]       does CAND answer like REF? (exit 0 pass, 1 fail)
  evalrun thresholds REF.h5 RUN.h5... --out T.toml           derive thresholds from several runs' spread
  evalrun batch JOBS.toml                                    run + compare a list of jobs, one summary table
  evalrun submit JOBS.toml [--dry-run]                       the same as Slurm jobs (array + compare job)
  evalrun make-model --head qa|mlm --preset tiny --out DIR   write a random Hugging Face checkpoint
  evalrun quantize CONFIG.toml --out DIR                     write the INT8 checkpoint of a direct-quantized run
  evalrun tokenize --tokenizer DIR [--pair] [--offsets] FILE.jsonl|-   ids per line (--decode: ids -> text)
  evalrun help-config                                        every config key, its type and default
  evalrun --version

Each command takes --help. Exit status: 0 ok, 1 failure, 2 bad input (config, files, data).
)";

int run_main(int argc, char** argv) {
  CLI::App app{"Run one evaluation described by a TOML config", "evalrun run"};
  std::string config;
  std::vector<std::string> overrides;
  bool verbose = false, resume = false;
  bool dry_run = false;
  app.add_option("config", config, "TOML run description")->required();
  app.add_flag("--dry-run", dry_run, "validate the config and print each rank's plan (device, environment, plugin); run nothing");
  app.add_option("--set", overrides, "override a config key: section.key=value (repeatable)");
  app.add_flag("--resume", resume,
               "continue an interrupted run: skip the work items in <output.path>.journal/ (the same config "
               "and model are required; without a journal the whole run is done)");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  if (auto stop = evalrun::parse_command_line(app, argc, argv)) return *stop;
  evalrun::MpiWorld world(&argc, &argv);
  // Destroyed before `world`, on every way out of this function: HDF5 is shut down before MPI. Where
  // HDF5 cannot shut down (a result file's close failed; the run has failed and said so), the process
  // ends here: MPI_Finalize would crash inside HDF5, and mpirun ends the other ranks.
  struct Hdf5BeforeMpi {
    ~Hdf5BeforeMpi() {
      if (!evalrun::hdf5_shutdown()) {
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(evalrun::kExitFailed);
      }
    }
  } hdf5_before_mpi;
  evalrun::init_logging(world.rank(), world.size(), verbose);
  try {
    evalrun::RunSpec spec;
    world.collective_step([&] {
      spec = evalrun::load_run_spec(config, overrides);
      if (world.is_root()) evalrun::check_run_paths(spec);  // before any work: no output may be an input
    });
    return dry_run ? evalrun::dry_run_command(world, spec) : evalrun::run_command(world, spec, resume);
  } catch (const evalrun::PeerFailed& e) {
    // The failing rank printed its own message; the others leave with its exit status.
    return e.exit_code;
  } catch (const evalrun::InputError& e) {
    std::fprintf(stderr, "evalrun: error (rank %d): %s\n", world.rank(), e.what());
    return evalrun::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "evalrun: failed (rank %d): %s\n", world.rank(), e.what());
    return evalrun::kExitFailed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? evalrun::kExitBadInput : 0;
  }
  if (args[0] == "--version") {
    std::printf("evalrun %s (%s)\n", evalrun::version(), evalrun::git_revision());
    return 0;
  }
  const std::string& cmd = args[0];
  try {
    if (cmd == "inspect") return evalrun::inspect_command(argc - 1, argv + 1);
    if (cmd == "compare") return evalrun::compare_command(argc - 1, argv + 1);
    if (cmd == "thresholds") return evalrun::thresholds_command(argc - 1, argv + 1);
    if (cmd == "batch") return evalrun::batch_command(argc - 1, argv + 1);
    if (cmd == "submit") return evalrun::submit_command(argc - 1, argv + 1);
    if (cmd == "make-model") return evalrun::make_model_command(argc - 1, argv + 1);
    if (cmd == "quantize") return evalrun::quantize_command(argc - 1, argv + 1);
    if (cmd == "tokenize") return evalrun::tokenize_command(argc - 1, argv + 1);
    if (cmd == "help-config") {
      std::fputs(evalrun::describe_config_keys().c_str(), stdout);
      return 0;
    }
  } catch (const evalrun::InputError& e) {
    std::fprintf(stderr, "evalrun: error: %s\n", e.what());
    return evalrun::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "evalrun: failed: %s\n", e.what());
    return evalrun::kExitFailed;
  }
  if (cmd == "run") return run_main(argc - 1, argv + 1);
  if (cmd.size() > 0 && cmd[0] == '-') {
    std::fprintf(stderr, "evalrun: unknown option '%s'\n%s", cmd.c_str(), kUsage);
    return evalrun::kExitBadInput;
  }
  return run_main(argc, argv);  // `evalrun CONFIG.toml ...`
}
