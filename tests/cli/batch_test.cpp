// `evalrun thresholds` and `evalrun batch` through the real binary, on a tiny random QA model: derived
// thresholds pass the runs they came from and fail a bf16 run; a jobs file of two runs passes and lists
// both; a perturbing override fails naming the run; a jobs file with an unknown key is refused (exit 2,
// file:line).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class Batch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-batch");
    auto r = run_process(kBin + " make-model --head qa --preset tiny --seed 3 --out " + path("qa"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(path("qa.toml")) << "[run]\nname = \"qa\"\nthreads = 1\n[model]\npath = \"" << path("qa")
                                   << "\"\n[task]\nkind = \"qa\"\ndataset = \"" << kSrc
                                   << "/data/demo_squad.json\"\nmax_seq_length = 128\ndoc_stride = 32\n";
    for (const auto& [out, extra] : std::vector<std::pair<std::string, std::string>>{
             {"ref.h5", "--set task.batch_size=4"},
             {"r1.h5", "--set task.batch_size=1"},
             {"r2.h5", "--set task.batch_size=3"},
             {"bf16.h5", "--set model.dtype=bf16"}}) {
      r = run_process(kBin + " " + path("qa.toml") + " --set output.path=" + quote(path(out)) + " " + extra);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    std::ofstream(path("strict.toml")) << "[qa]\nmax_logit_diff = 0.0\nmean_logit_diff = 0.0\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::string read(const std::string& name) {
    std::ifstream in(path(name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static inline fs::path dir_;
};

TEST_F(Batch, DerivedThresholdsPassTheirRunsAndFailABf16Run) {
  auto r = run_process(kBin + " thresholds " + path("ref.h5") + " " + path("r1.h5") + " " + path("r2.h5") +
                       " --percentile 99 --margin 1.5 --out " + path("derived.toml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string t = read("derived.toml");
  EXPECT_NE(t.find("# Thresholds for `evalrun compare`"), std::string::npos) << t;
  EXPECT_NE(t.find("[qa]\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\nmax_logit_diff = "), std::string::npos) << t;
  EXPECT_NE(t.find("\nanswer_agreement_min = "), std::string::npos) << t;
  EXPECT_EQ(t.find("[mlm]"), std::string::npos) << t;  // only the task's section
  for (const char* run : {"r1.h5", "r2.h5"}) {
    r = run_process(kBin + " compare " + path("ref.h5") + " " + path(run) + " --thresholds " + path("derived.toml"));
    EXPECT_EQ(r.exit_code, 0) << run << "\n" << r.output << t;
  }
  r = run_process(kBin + " compare " + path("ref.h5") + " " + path("bf16.h5") + " --thresholds " + path("derived.toml"));
  EXPECT_EQ(r.exit_code, 1) << r.output << t;
  EXPECT_NE(r.output.find("RESULT: FAIL (max_logit_diff"), std::string::npos) << r.output;
  // a margin below 1 would make the runs fail their own limits: refused
  r = run_process(kBin + " thresholds " + path("ref.h5") + " " + path("r1.h5") + " --margin 0.5 --out " + path("x.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST_F(Batch, TwoRunsUnderMpirunPassAndTheTableListsBoth) {
  std::ofstream(path("ok.toml")) << "[batch]\nname = \"ci\"\nranks = 2\n"
                                 << "[[run]]\nname = \"bs4\"\nconfig = \"" << path("qa.toml")
                                 << "\"\nset = [\"task.batch_size=4\"]\nreference = \"" << path("ref.h5") << "\"\n"
                                 << "[[run]]\nname = \"bs1\"\nconfig = \"" << path("qa.toml")
                                 << "\"\nset = [\"task.batch_size=1\"]\nreference = \"" << path("ref.h5") << "\"\n";
  auto r = run_process("timeout 600 " + kBin + " batch " + path("ok.toml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch ci: 2 run(s) on 2 ranks each"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bs4 | qa   | PASS   |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bs1 | qa   | PASS   |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("RESULT: PASS"), std::string::npos) << r.output;
}

TEST_F(Batch, PerturbingOverrideFailsNamingTheRun) {
  std::ofstream(path("bf16.toml")) << "[batch]\nname = \"precision\"\n"
                                   << "[[run]]\nname = \"fp32\"\nconfig = \"" << path("qa.toml")
                                   << "\"\nset = [\"task.batch_size=4\"]\nreference = \""
                                   << path("ref.h5") << "\"\nthresholds = \"" << path("strict.toml") << "\"\n"
                                   << "[[run]]\nname = \"bf16\"\nconfig = \"" << path("qa.toml")
                                   << "\"\nset = [\"model.dtype=bf16\"]\nreference = \"" << path("ref.h5")
                                   << "\"\nthresholds = \"" << path("strict.toml") << "\"\n";
  auto r = run_process("timeout 600 " + kBin + " batch " + path("bf16.toml"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("| fp32 | qa   | PASS   |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bf16 | qa   | FAIL   | max_logit_diff"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("RESULT: FAIL (bf16)"), std::string::npos) << r.output;
}

TEST_F(Batch, BadJobsFilesAreRefusedNamingFileAndLine) {
  std::ofstream(path("typo.toml")) << "[batch]\nname = \"x\"\n[[run]]\nconfig = \"" << path("qa.toml")
                                   << "\"\nrefrence = \"" << path("ref.h5") << "\"\n";
  auto r = run_process(kBin + " batch " + path("typo.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("typo.toml:5: run.refrence"), std::string::npos) << r.output;

  std::ofstream(path("missing.toml")) << "[[run]]\nconfig = \"" << path("nope.toml") << "\"\nreference = \""
                                      << path("ref.h5") << "\"\n";
  r = run_process(kBin + " batch " + path("missing.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.toml:2: run.config"), std::string::npos) << r.output;

  std::ofstream(path("ranks.toml")) << "[batch]\nranks = \"two\"\n[[run]]\nconfig = \"" << path("qa.toml")
                                    << "\"\nreference = \"" << path("ref.h5") << "\"\n";
  r = run_process(kBin + " batch " + path("ranks.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ranks.toml:2: batch.ranks"), std::string::npos) << r.output;
}

TEST_F(Batch, SplitIntoRunOnlyAndCompareOnlyAsSlurmArrayTasksDo) {
  std::ofstream(path("two.toml")) << "[batch]\nname = \"two\"\n"
                                  << "[[run]]\nname = \"a\"\nconfig = \"" << path("qa.toml")
                                  << "\"\nset = [\"task.batch_size=2\"]\nreference = \"" << path("ref.h5") << "\"\n"
                                  << "[[run]]\nname = \"b\"\nconfig = \"" << path("qa.toml")
                                  << "\"\nset = [\"task.batch_size=7\"]\nreference = \"" << path("ref.h5") << "\"\n";
  const std::string out = path("split");
  // run 2 alone: its result is kept as run2.h5, nothing compared
  auto r = run_process(kBin + " batch " + path("two.toml") + " --only 2 --no-compare --outputs " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("RESULT: DONE (not compared)"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(out) / "run2.h5"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "run1.h5"));
  // comparing now: run 1 never finished
  r = run_process(kBin + " batch " + path("two.toml") + " --compare-only --outputs " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("| a   | ?    | RUN FAILED | no result file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| b   | qa   | PASS"), std::string::npos) << r.output;
  // run 1 too, then every comparison passes
  r = run_process(kBin + " batch " + path("two.toml") + " --only 1 --no-compare --outputs " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_process(kBin + " batch " + path("two.toml") + " --compare-only --outputs " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // bad use
  r = run_process(kBin + " batch " + path("two.toml") + " --only 3 --no-compare --outputs " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--only: run 3 does not exist"), std::string::npos) << r.output;
  r = run_process(kBin + " batch " + path("two.toml") + " --no-compare");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --outputs"), std::string::npos) << r.output;
}

TEST_F(Batch, SubmitDryRunWritesAnArrayAndADependentCompareJob) {
  std::ofstream(path("sub.toml")) << "[batch]\nname = \"sub\"\nranks = 2\n"
                                  << "[[run]]\nconfig = \"" << path("qa.toml") << "\"\nreference = \"" << path("ref.h5") << "\"\n"
                                  << "[[run]]\nconfig = \"" << path("qa.toml") << "\"\nreference = \"" << path("ref.h5") << "\"\n";
  auto r = run_process(kBin + " submit " + path("sub.toml") + " --dry-run --dir " + path("subdir") +
                       " --time 00:30:00 --cpus-per-task 3 --sbatch-arg=--account=xyz");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"#SBATCH --array=1-2", "#SBATCH --ntasks=2", "#SBATCH --cpus-per-task=3",
                           "#SBATCH --time=00:30:00", "#SBATCH --account=xyz", "--only \"$SLURM_ARRAY_TASK_ID\" --no-compare",
                           "--compare-only", "sbatch --parsable --dependency=afterany:$ARRAY_JOB"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_TRUE(fs::exists(fs::path(path("subdir")) / "array.sbatch"));
  EXPECT_TRUE(fs::exists(fs::path(path("subdir")) / "compare.sbatch"));
  // a bad jobs file is refused before anything is written
  std::ofstream(path("badsub.toml")) << "[batch]\nnmae = \"x\"\n";
  r = run_process(kBin + " submit " + path("badsub.toml") + " --dry-run --dir " + path("never"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(path("never")));
}

}  // namespace
