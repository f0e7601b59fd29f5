#include "app/submit_command.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/command_line.hpp"
#include "app/batch_command.hpp"
#include "app/path_guard.hpp"
#include "common/errors.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;

// Single-quoted for bash.
std::string sh(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string utc_stamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

struct Options {
  std::string jobs, dir, time, partition;
  int cpus_per_task = 1;
  std::vector<std::string> sbatch_args;
  bool dry_run = false;
};

// The #SBATCH lines every generated script shares.
std::string common_header(const Options& o, const std::string& name) {
  std::string h = "#!/bin/bash\n#SBATCH --job-name=" + name + "\n#SBATCH --chdir=" + fs::current_path().string() + "\n";
  if (!o.time.empty()) h += "#SBATCH --time=" + o.time + "\n";
  if (!o.partition.empty()) h += "#SBATCH --partition=" + o.partition + "\n";
  for (const auto& a : o.sbatch_args) h += "#SBATCH " + a + "\n";
  return h;
}

void write_script(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InputError(path.string(), "cannot write the job script");
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
}

// Runs `command`, returns its stdout; a non-zero exit is an error naming the command and its output.
std::string run_capture(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw InputError("sbatch", "'" + command + "' failed: " + out);
  return out;
}

// `sbatch --parsable` prints "jobid" or "jobid;cluster".
std::string job_id_of(const std::string& parsable) {
  std::string id;
  for (char ch : parsable) {
    if (ch == ';' || ch == '\n') break;
    id += ch;
  }
  if (id.empty()) throw InputError("sbatch", "printed no job id: '" + parsable + "'");
  return id;
}

}  // namespace

int submit_command(int argc, char** argv) {
  CLI::App app{"Submit a batch to Slurm: a job array with one task per [[run]] of the jobs file (each runs "
               "`evalrun batch --only N --no-compare`, under srun when [batch] ranks is set) and a job that "
               "starts after the array ends and compares every result with its reference (`evalrun batch "
               "--compare-only`); its exit status is the verdict. Paths in the jobs file are relative to the "
               "current directory, which the jobs use as their working directory.",
               "evalrun submit"};
  Options o;
  app.add_option("jobs", o.jobs, "jobs TOML file (as for evalrun batch)")->required();
  app.add_option("--dir", o.dir, "where scripts, logs, results and reports go (default: results/slurm/<batch name>-<UTC time>)");
  app.add_option("--time", o.time, "#SBATCH --time of every job, e.g. 02:00:00");
  app.add_option("--partition", o.partition, "#SBATCH --partition of every job");
  app.add_option("--cpus-per-task", o.cpus_per_task, "#SBATCH --cpus-per-task of the run jobs (= threads per rank)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sbatch-arg", o.sbatch_args, "extra #SBATCH line, e.g. --sbatch-arg=--account=abc (repeatable)");
  app.add_flag("--dry-run", o.dry_run, "write the scripts and print them with the sbatch commands; submit nothing");
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  const BatchSpec spec = load_batch_spec(o.jobs);  // strict: a bad jobs file fails before anything is written
  if (spec.runs.empty()) throw InputError(o.jobs, "has no [[run]]");
  const fs::path dir = fs::absolute(o.dir.empty() ? "results/slurm/" + spec.name + "-" + utc_stamp() : o.dir);
  {
    PathGuard guard;
    add_batch_paths(guard, spec, o.jobs, (dir / "results").string(), (dir / "reports").string(), false);
    for (const char* file : {"array.sbatch", "compare.sbatch", "summary.md"}) guard.output("--dir", (dir / file).string());
    guard.check();
  }
  std::error_code ec;
  for (const char* sub : {"logs", "results", "reports"}) fs::create_directories(dir / sub, ec);
  if (!fs::is_directory(dir / "logs")) throw InputError(dir.string(), "cannot create the submission directory");

  const std::string exe = self_exe();
  const std::string jobs = fs::absolute(o.jobs).string();
  const int tasks = spec.ranks > 0 ? spec.ranks : 1;
  const std::string array =
      common_header(o, "evalrun-" + spec.name) + "#SBATCH --array=1-" + std::to_string(spec.runs.size()) +
      "\n#SBATCH --ntasks=" + std::to_string(tasks) + "\n#SBATCH --cpus-per-task=" + std::to_string(o.cpus_per_task) +
      "\n#SBATCH --output=" + (dir / "logs" / "run-%a-%A.out").string() +
      "\n# One run of " + jobs + " per array task; its result is results/run<N>.h5 (threads per rank: "
      "SLURM_CPUS_PER_TASK).\nexec " + sh(exe) + " batch " + sh(jobs) +
      " --only \"$SLURM_ARRAY_TASK_ID\" --no-compare --outputs " + sh((dir / "results").string()) + "\n";
  const std::string compare =
      common_header(o, "evalrun-" + spec.name + "-compare") + "#SBATCH --ntasks=1\n#SBATCH --output=" +
      (dir / "logs" / "compare-%j.out").string() +
      "\n# After the array: compare every result with its reference; the exit status is the verdict "
      "(0 pass, 1 a run failed or is missing, 2 bad input).\nset -o pipefail\n" + sh(exe) + " batch " + sh(jobs) +
      " --compare-only --outputs " + sh((dir / "results").string()) + " --reports " + sh((dir / "reports").string()) +
      " | tee " + sh((dir / "summary.md").string()) + "\n";
  const fs::path array_path = dir / "array.sbatch", compare_path = dir / "compare.sbatch";
  write_script(array_path, array);
  write_script(compare_path, compare);

  const std::string submit_array = "sbatch --parsable " + sh(array_path.string());
  const std::string submit_compare = "sbatch --parsable --dependency=afterany:$ARRAY_JOB " + sh(compare_path.string());
  if (o.dry_run) {
    std::printf("# %s\n%s\n# %s\n%s\n# submit with:\nARRAY_JOB=$(%s)\n%s\n", array_path.c_str(), array.c_str(),
                compare_path.c_str(), compare.c_str(), submit_array.c_str(), submit_compare.c_str());
    return kExitOk;
  }
  const std::string array_id = job_id_of(run_capture(submit_array));
  const std::string compare_id = job_id_of(run_capture("sbatch --parsable --dependency=afterany:" + array_id + " " +
                                                       sh(compare_path.string())));
  std::printf("array job %s (%zu runs), compare job %s\n", array_id.c_str(), spec.runs.size(), compare_id.c_str());
  std::printf("scripts, logs/, results/, reports/ and summary.md in %s\n", dir.c_str());
  return kExitOk;
}

}  // namespace evalrun
