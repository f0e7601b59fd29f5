#include "app/batch_command.hpp"

#include <CLI/CLI.hpp>
#include <toml.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/command_line.hpp"
#include "app/path_guard.hpp"
#include "app/report_assets.hpp"
#include "common/errors.hpp"
#include "io/text_file.hpp"
#include "common/toml_file.hpp"
#include "common/text.hpp"
#include "validate/compare.hpp"
#include "validate/report.hpp"
#include "validate/thresholds.hpp"

extern char** environ;

namespace evalrun {
namespace fs = std::filesystem;
namespace {

std::string at(const std::string& path, const toml::value& v) {
  const auto loc = v.location();
  return loc.line() > 0 ? path + ":" + std::to_string(loc.line()) : path;
}

std::string keys_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

void check_keys(const std::string& path, const std::string& section, const toml::value& table,
                const std::vector<std::string>& allowed) {
  for (const auto& [key, v] : table.as_table())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      throw InputError(at(path, v) + ": " + section + "." + key,
                       "unknown key; [" + section + "] keys are " + keys_list(allowed));
}

std::string get_string(const std::string& path, const std::string& section, const toml::value& v, const std::string& key) {
  if (!v.is_string()) throw InputError(at(path, v) + ": " + section + "." + key, "must be a string");
  return v.as_string().str;
}

void require_file(const std::string& path, const std::string& section, const toml::value& v, const std::string& key,
                  const std::string& file) {
  refuse_directory(file, at(path, v) + ": " + section + "." + key);
  if (!fs::is_regular_file(file))
    throw InputError(at(path, v) + ": " + section + "." + key,
                     "file '" + file + "' not found (paths are relative to the current directory)");
}

// Runs argv with stdout and stderr into `log`; returns the exit status (-1: killed by a signal).
int spawn_and_wait(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw std::runtime_error("cannot start '" + args[0] + "': " + std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string tail_of(const std::string& file, std::size_t max_lines) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (std::size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
    out += "    " + lines[i] + "\n";
  return out;
}

void write_report(const std::string& path, const std::string& text) { write_text_file(path, text, "the report"); }

// How a run with `ranks` ranks is started: srun inside a Slurm job (it knows the allocation; PMIx is how
// Open MPI ranks find each other under srun), mpirun elsewhere. EVALRUN_LAUNCHER=srun|mpirun overrides.
std::vector<std::string> launcher_args(int ranks) {
  const char* forced = std::getenv("EVALRUN_LAUNCHER");
  std::string launcher = forced != nullptr && *forced != '\0' ? forced : (std::getenv("SLURM_JOB_ID") ? "srun" : "mpirun");
  // --kill-on-bad-exit: a rank that dies ends its peers instead of leaving them waiting in a collective.
  if (launcher == "srun") return {"srun", "--mpi=pmix", "--kill-on-bad-exit=1", "-n", std::to_string(ranks)};
  if (launcher != "mpirun") throw InputError("EVALRUN_LAUNCHER", "'" + launcher + "' is not a launcher (srun or mpirun)");
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(ranks), "--bind-to", "none", "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  return args;
}


struct Row {
  std::string run, task = "?", result, failing, seconds;
  int status = kExitOk;  // this run's share of the exit status
};

std::string render_table(const std::vector<Row>& rows) {
  const std::vector<std::string> head = {"run", "task", "result", "failing metrics", "seconds"};
  std::vector<std::size_t> w(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  auto cells = [](const Row& r) { return std::vector<std::string>{r.run, r.task, r.result, r.failing, r.seconds}; };
  for (const auto& r : rows) {
    const auto c = cells(r);
    for (std::size_t i = 0; i < c.size(); ++i) w[i] = std::max(w[i], c[i].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& c) {
    out << "|";
    for (std::size_t i = 0; i < c.size(); ++i) out << " " << c[i] << std::string(w[i] - c[i].size(), ' ') << " |";
    out << "\n";
  };
  line(head);
  out << "|";
  for (auto n : w) out << std::string(n + 2, '-') << "|";
  out << "\n";
  for (const auto& r : rows) line(cells(r));
  return out.str();
}

}  // namespace

std::string batch_result_name(std::size_t index) { return "run" + std::to_string(index + 1); }

// The run's position and name, reduced to characters safe in a file name.
std::string batch_report_stem(const std::string& name, std::size_t index) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%02zu-", index + 1);
  std::string stem = prefix;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                    ch == '-' || ch == '_';
    stem += ok ? ch : '_';
  }
  return stem;
}

BatchSpec load_batch_spec(const std::string& path) {
  const toml::value root = read_toml_file(path, "jobs file");
  BatchSpec spec;
  spec.name = fs::path(path).stem().string();
  bool have_runs = false;
  for (const auto& [section, v] : root.as_table()) {
    if (section == "batch" && v.is_table()) {
      check_keys(path, "batch", v, {"name", "ranks"});
      for (const auto& [key, x] : v.as_table()) {
        if (key == "name") {
          spec.name = get_string(path, "batch", x, key);
        } else {  // ranks
          if (!x.is_integer() || x.as_integer() < 1 || x.as_integer() > 4096)
            throw InputError(at(path, x) + ": batch.ranks", "must be an integer in 1..4096");
          spec.ranks = static_cast<int>(x.as_integer());
        }
      }
    } else if (section == "run" && v.is_array()) {
      have_runs = true;
      for (const auto& t : v.as_array()) {
        if (!t.is_table()) throw InputError(at(path, t) + ": run", "must be an array of tables ([[run]])");
        check_keys(path, "run", t, {"name", "config", "set", "reference", "thresholds"});
        BatchRun r;
        const auto& tab = t.as_table();
        for (const char* req : {"config", "reference"})
          if (tab.count(req) == 0)
            throw InputError(at(path, t) + ": run." + req, "missing required key in [[run]] #" +
                                                               std::to_string(spec.runs.size() + 1));
        for (const auto& [key, x] : tab) {
          if (key == "set") {
            if (!x.is_array()) throw InputError(at(path, x) + ": run.set", "must be an array of \"section.key=value\" strings");
            for (const auto& o : x.as_array()) {
              const std::string s = get_string(path, "run", o, "set");
              if (s.find('=') == std::string::npos)
                throw InputError(at(path, o) + ": run.set", "'" + s + "' is not section.key=value");
              r.overrides.push_back(s);
            }
            continue;
          }
          const std::string s = get_string(path, "run", x, key);
          if (key == "name") r.name = s;
          else if (key == "config") r.config = s;
          else if (key == "reference") r.reference = s;
          else r.thresholds = s;
          if (key != "name") require_file(path, "run", x, key, s);
          if (key == "thresholds") (void)Thresholds::load(s);  // its own file:line errors
        }
        if (r.name.empty()) {
          r.name = fs::path(r.config).stem().string();
          for (const auto& o : r.overrides) r.name += " " + o;
        }
        spec.runs.push_back(std::move(r));
      }
    } else {
      throw InputError(at(path, v) + ": " + section,
                       "unknown section; a jobs file has [batch] (name, ranks) and [[run]] tables");
    }
  }
  if (!have_runs || spec.runs.empty()) throw InputError(path, "no [[run]] tables");
  return spec;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot resolve /proc/self/exe: " + ec.message());
  return p.string();
}

int batch_command(int argc, char** argv) {
  CLI::App app{"Run every [[run]] of a jobs file (config + overrides, under mpirun when [batch] ranks is set), "
               "compare each result with its reference and print one summary table. Paths in the jobs file are "
               "relative to the current directory. Exit 0 when every run passes, 1 when one fails, 2 on bad input.",
               "evalrun batch"};
  std::string jobs, keep, reports;
  std::vector<std::size_t> only;
  bool no_compare = false, compare_only = false;
  app.add_option("jobs", jobs, "jobs TOML file: [batch] name, ranks; [[run]] config, set, reference, thresholds")->required();
  app.add_option("--outputs", keep, "keep each run's result file in this directory (default: a temporary one, removed)");
  app.add_option("--reports", reports,
                 "write each run's comparison here as NAME.md, NAME.json and NAME.html (plots); failing runs' "
                 "summaries are printed either way");
  app.add_option("--only", only, "run only these runs (1-based positions in the jobs file; e.g. one Slurm array task)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  auto* run_only = app.add_flag("--no-compare", no_compare,
                                "run and keep the results (needs --outputs), compare nothing; exit 0 when every run succeeded");
  app.add_flag("--compare-only", compare_only,
               "run nothing: compare the results an earlier --no-compare left in --outputs (runN.h5)")
      ->excludes(run_only);
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  if ((no_compare || compare_only) && keep.empty()) {
    throw InputError(no_compare ? "--no-compare" : "--compare-only", "needs --outputs DIR (where the results are kept)");
  }
  const BatchSpec spec = load_batch_spec(jobs);
  for (std::size_t k : only) {
    if (k > spec.runs.size()) {
      throw InputError("--only", "run " + std::to_string(k) + " does not exist: " + jobs + " has " +
                                     std::to_string(spec.runs.size()) + " run(s)");
    }
  }
  {
    PathGuard guard;
    add_batch_paths(guard, spec, jobs, keep, reports, compare_only);
    guard.check();
  }
  auto selected = [&](std::size_t i) { return only.empty() || std::find(only.begin(), only.end(), i + 1) != only.end(); };
  const std::string exe = self_exe();
  std::string plotly;
  if (!reports.empty()) {
    plotly = load_plotly_js("--reports");
    std::error_code ec;
    fs::create_directories(reports, ec);
    if (!fs::is_directory(reports)) throw InputError(reports, "cannot create the reports directory");
  }

  fs::path dir;
  if (keep.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "evalrun-batch-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory");
    dir = tmpl;
  } else {
    dir = keep;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir)) throw InputError(keep, "cannot create the outputs directory");
  }

  std::vector<Row> rows;
  for (std::size_t i = 0; i < spec.runs.size(); ++i) {
    const BatchRun& run = spec.runs[i];
    Row row;
    row.run = run.name;
    const std::string out = (dir / (batch_result_name(i) + ".h5")).string();
    const std::string log = (dir / (batch_result_name(i) + ".log")).string();
    std::vector<std::string> args;
    if (spec.ranks > 0) args = launcher_args(spec.ranks);
    args.push_back(exe);
    args.push_back(run.config);
    for (const auto& o : run.overrides) {
      args.push_back("--set");
      args.push_back(o);
    }
    args.push_back("--set");
    args.push_back("output.path=" + out);
    // A run of this batch that was interrupted (killed, a requeued Slurm array task) continues from its
    // journal; without one, --resume runs everything.
    args.push_back("--resume");
    if (!selected(i)) continue;
    int code = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (compare_only) {
      if (!fs::exists(out)) {
        code = kExitFailed;
        std::ofstream(log, std::ios::app) << "evalrun batch: no result " << out << " (the run did not finish)\n";
      }
    } else {
      std::fprintf(stderr, "evalrun batch: [%zu/%zu] %s\n", i + 1, spec.runs.size(), run.name.c_str());
      code = spawn_and_wait(args, log);
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    row.seconds = secs;
    if (code != 0) {
      row.status = code == kExitBadInput ? kExitBadInput : kExitFailed;
      row.result = code == kExitBadInput ? "BAD INPUT" : "RUN FAILED";
      row.failing = compare_only ? "no result file (the run did not finish)" : "run exit " + std::to_string(code);
      std::fprintf(stderr, "evalrun batch: run '%s' exited with %d; its last lines:\n%s", run.name.c_str(), code,
                   tail_of(log, 10).c_str());
    } else if (no_compare) {
      row.result = "DONE";
      row.status = kExitOk;
    } else {
      try {
        const Thresholds t = run.thresholds.empty() ? Thresholds() : Thresholds::load(run.thresholds);
        const Comparison c = compare_results(run.reference, out, t);
        row.task = c.task;
        row.result = c.passed() ? "PASS" : "FAIL";
        row.status = c.passed() ? kExitOk : kExitFailed;
        for (const auto& m : c.failed_metrics()) row.failing += (row.failing.empty() ? "" : ", ") + m;
        if (!c.passed()) {
          std::fprintf(stderr, "evalrun batch: run '%s' FAILED against %s:\n%s", run.name.c_str(), run.reference.c_str(),
                       render_summary(c).c_str());
        }
        if (!reports.empty()) {
          const fs::path base = fs::path(reports) / batch_report_stem(run.name, i);
          write_report(base.string() + ".md", render_markdown(c));
          write_report(base.string() + ".json", render_json(c));
          write_report(base.string() + ".html", render_html(c, plotly));
        }
      } catch (const InputError& e) {
        row.status = kExitBadInput;
        row.result = "CANNOT COMPARE";
        row.failing = e.what();
      }
    }
    if (row.failing.empty()) row.failing = "-";
    rows.push_back(std::move(row));
  }
  if (keep.empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  int status = kExitOk;
  std::string failed;
  for (const auto& r : rows) {
    if (r.status == kExitBadInput) status = kExitBadInput;
    else if (r.status == kExitFailed && status == kExitOk) status = kExitFailed;
    if (r.status != kExitOk) failed += (failed.empty() ? "" : ", ") + r.run;
  }
  std::printf("batch %s: %zu run(s)%s\n%s", spec.name.c_str(), rows.size(),
              spec.ranks > 0 ? (" on " + std::to_string(spec.ranks) + " ranks each").c_str() : "",
              render_table(rows).c_str());
  std::printf("RESULT: %s\n", status == kExitOk ? (no_compare ? "DONE (not compared)" : "PASS")
                                                : ("FAIL (" + failed + ")").c_str());
  return status;
}

}  // namespace evalrun
