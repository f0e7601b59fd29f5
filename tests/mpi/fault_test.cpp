// Faults through the real binary under mpirun: a rank killed by a signal mid-run ends the whole job
// within seconds (no rank left waiting in a collective), and the earlier result file at the same
// output path survives byte for byte. A full disk (a small tmpfs) while the journal or the result file
// is written is exit 1 with one line naming the file and the reason, never a crash, and --resume
// finishes the run once there is space again. A stopped rank (SIGSTOP) ends the job through the stall
// watchdog (run.stall_timeout), naming the rank and its host, and --resume continues.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Fault, KilledRankEndsTheJobAndKeepsTheEarlierResult) {
  const fs::path dir = make_temp_dir("evalrun-fault");
  auto r = run_process(kBin + " make-model --preset tiny-llama --seed 2 --out " + (dir / "llama").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    std::ofstream corpus(dir / "corpus.txt");  // long enough for ~20 s of scoring on 2 ranks
    for (int i = 0; i < 40000; ++i) corpus << "The river rose slowly through the night, and the fields were under water.\n";
  }
  std::ofstream(dir / "ppl.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \"" << (dir / "llama").string()
                                  << "\"\n[task]\nkind = \"perplexity\"\ndataset = \"" << (dir / "corpus.txt").string()
                                  << "\"\ncontext_length = 64\nstride = 32\n[output]\npath = \""
                                  << (dir / "out.h5").string() << "\"\n";
  // An earlier, finished result at the same path.
  r = run_process(mpirun(2) + kBin + " " + (dir / "ppl.toml").string() + " --set task.max_samples=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string before = bytes_of(dir / "out.h5");
  ASSERT_FALSE(before.empty());

  // The full run; two seconds after the work was handed out (the ranks are scoring), one rank is
  // killed with SIGKILL.
  const std::string script =
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 " + kBin + " " + (dir / "ppl.toml").string() +
      " > " + (dir / "run.log").string() + " 2>&1 & mp=$!; "
      "for i in $(seq 1 300); do grep -q prepared " + (dir / "run.log").string() + " 2>/dev/null && break; sleep 0.2; done; "
      "sleep 2; "
      "victim=$(pgrep -P $mp | head -1); kill -9 $victim; date +%s.%N; wait $mp; echo \"exit=$?\"; date +%s.%N";
  r = run_process("timeout 300 bash -c " + quote(script));
  std::istringstream lines(r.output);
  double killed_at = 0, ended_at = 0;
  std::string exit_line;
  lines >> killed_at >> exit_line >> ended_at;
  EXPECT_GT(killed_at, 0) << r.output;
  EXPECT_NE(exit_line, "exit=0") << r.output << bytes_of(dir / "run.log");
  EXPECT_EQ(bytes_of(dir / "run.log").find("wrote"), std::string::npos) << "the run finished before the kill";
  EXPECT_LT(ended_at - killed_at, 20.0) << "the job did not end within 20 s of the kill\n" << bytes_of(dir / "run.log");
  EXPECT_NE(bytes_of(dir / "run.log").find("signal 9"), std::string::npos) << bytes_of(dir / "run.log");
  EXPECT_TRUE(bytes_of(dir / "out.h5") == before) << "the earlier result file changed";
  fs::remove_all(dir);
}

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "output: " << (text) << "\n   lacks: " << (part)

// A tmpfs of `kib` KiB mounted at `dir` for the test's lifetime (root only: skipped elsewhere).
struct SmallDisk {
  fs::path dir;
  bool mounted = false;
  SmallDisk(const fs::path& d, int kib) : dir(d) {
    fs::create_directories(dir);
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + std::to_string(kib) + "k").c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

// Fills the filesystem of `dir` with dir/filler, then frees `pages` pages of 4 KiB again.
void leave_free(const fs::path& dir, int pages) {
  const fs::path filler = dir / "filler";
  {
    std::ofstream f(filler, std::ios::binary);
    const std::string block(4096, 'x');
    while (f.write(block.data(), static_cast<std::streamsize>(block.size())) && f.flush()) {
    }
  }
  const auto size = fs::file_size(filler);
  fs::resize_file(filler, size > static_cast<std::uintmax_t>(pages) * 4096 ? size - pages * 4096u : 0);
}

// The perplexity results of two files agree (timing aside).
void expect_same_scores(const fs::path& a_path, const fs::path& b_path) {
  evalrun::H5Reader a(a_path.string()), b(b_path.string());
  EXPECT_EQ(a.read_i64("/scores/position"), b.read_i64("/scores/position"));
  const auto la = a.read_f64("/scores/log_prob"), lb = b.read_f64("/scores/log_prob");
  ASSERT_EQ(la.size(), lb.size());
  double worst = 0;
  for (std::size_t i = 0; i < la.size(); ++i) worst = std::max(worst, std::fabs(la[i] - lb[i]));
  EXPECT_LE(worst, 1e-5);
}

class DiskFull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-diskfull");
    auto r = run_process(kBin + " make-model --preset tiny-llama --seed 2 --out " + (dir_ / "llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 300; ++i) corpus << "The river rose slowly through the night, and the fields were under water.\n";
    corpus.close();
    std::ofstream(dir_ / "ppl.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "llama").string()
                                     << "\"\n[task]\nkind = \"perplexity\"\ndataset = \"" << (dir_ / "corpus.txt").string()
                                     << "\"\ncontext_length = 32\nstride = 16\nbatch_size = 2\n";
    // The uninterrupted run the resumed ones must equal.
    r = run_process(mpirun(2) + run_cmd(dir_ / "ref.h5"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string run_cmd(const fs::path& out, const std::string& extra = "") {
    return kBin + " " + (dir_ / "ppl.toml").string() + " --set output.path=" + quote(out.string()) + " " + extra;
  }
  // The earlier result: a short run at the same path.
  static std::string earlier_result(const fs::path& out) {
    auto r = run_process(mpirun(2) + run_cmd(out, "--set task.max_samples=1"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return bytes_of(out);
  }
  static void expect_one_clean_failure(const ProcessResult& r, const std::string& path) {
    EXPECT_EQ(r.exit_code, 1) << r.output;  // not 139 (SIGSEGV) nor -1 (a signal)
    EXPECT_HAS(r.output, path);
    EXPECT_HAS(r.output, "No space left on device");
    EXPECT_EQ(r.output.find("Segmentation"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("signal"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("HDF5-DIAG"), std::string::npos) << r.output;
  }
  static inline fs::path dir_;
};

TEST_F(DiskFull, JournalWriteFailsThenResumeFinishes) {
  SmallDisk disk(dir_ / "disk-a", 2048);
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const fs::path out = disk.dir / "out.h5";
  const std::string before = earlier_result(out);
  ASSERT_FALSE(before.empty());
  // Room for the fingerprint and the two rank files' first page: the journal records overflow.
  leave_free(disk.dir, 3);
  auto r = run_process(mpirun(2) + run_cmd(out));
  expect_one_clean_failure(r, ".evj: cannot write the journal: No space left on device");
  EXPECT_TRUE(bytes_of(out) == before) << "the earlier result file changed";
  fs::remove(disk.dir / "filler");
  r = run_process(mpirun(2) + run_cmd(out, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "resuming: ");
  EXPECT_FALSE(fs::exists(disk.dir / "out.h5.journal"));
  expect_same_scores(dir_ / "ref.h5", out);
}

TEST_F(DiskFull, ResultWriteFailsThenResumeFinishes) {
  SmallDisk disk(dir_ / "disk-b", 2048);
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const fs::path out = disk.dir / "out.h5";
  const std::string before = earlier_result(out);
  // The journal on a disk of its own with room; the result's disk full.
  SmallDisk journal(disk.dir / "out.h5.journal", 16384);
  ASSERT_TRUE(journal.mounted);
  leave_free(disk.dir, 2);
  auto r = run_process(mpirun(2) + run_cmd(out));
  expect_one_clean_failure(r, out.string());
  EXPECT_TRUE(bytes_of(out) == before) << "the earlier result file changed";
  for (const auto& e : fs::directory_iterator(disk.dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "temporary file left: " << e.path();
  }
  fs::remove(disk.dir / "filler");
  r = run_process(mpirun(2) + run_cmd(out, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "work items done before, 0 to run");  // everything came from the journal
  expect_same_scores(dir_ / "ref.h5", out);
}

TEST(Stall, AStoppedRankEndsTheJobNamingItAndResumeContinues) {
  const fs::path dir = make_temp_dir("evalrun-stall");
  auto r = run_process(kBin + " make-model --preset tiny-llama --seed 2 --out " + (dir / "llama").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    std::ofstream corpus(dir / "corpus.txt");  // long enough for ~20 s of scoring on 2 ranks
    for (int i = 0; i < 40000; ++i) corpus << "The river rose slowly through the night, and the fields were under water.\n";
  }
  const fs::path out = dir / "out.h5", log = dir / "run.log";
  std::ofstream(dir / "ppl.toml") << "[run]\nname = \"ppl\"\nthreads = 1\nstall_timeout = 3\n[model]\npath = \""
                                  << (dir / "llama").string() << "\"\n[task]\nkind = \"perplexity\"\ndataset = \""
                                  << (dir / "corpus.txt").string()
                                  << "\"\ncontext_length = 64\nstride = 32\n[output]\npath = \"" << out.string() << "\"\n";
  // Rank 1 (found by its OMPI_COMM_WORLD_RANK) is stopped once the journal holds finished items.
  const std::string journal = out.string() + ".journal";
  const std::string script =
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 " + kBin + " " + (dir / "ppl.toml").string() +
      " > " + log.string() + " 2>&1 & mp=$!; "
      "for i in $(seq 1 1200); do [ -n \"$(find " + journal + " -name '*.evj' -size +4c 2>/dev/null)\" ] && break; "
      "sleep 0.05; done; "
      "for p in $(pgrep -P $mp); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p; done; "
      "kill -STOP $victim; date +%s.%N; wait $mp; echo \"exit=$?\"; date +%s.%N; "
      "kill -9 $victim 2>/dev/null; kill -CONT $victim 2>/dev/null; echo victim=$victim";
  r = run_process("timeout 300 bash -c " + quote(script));
  std::istringstream lines(r.output);
  double stopped_at = 0, ended_at = 0;
  std::string exit_line, victim_line;
  lines >> stopped_at >> exit_line >> ended_at >> victim_line;
  const std::string text = bytes_of(log);
  EXPECT_EQ(exit_line, "exit=1") << r.output << text;
  EXPECT_LT(ended_at - stopped_at, 30.0) << "the job did not end within 30 s of the stop\n" << text;
  EXPECT_EQ(text.find("wrote"), std::string::npos) << "the run finished before the stop";
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  EXPECT_HAS(text, "stalled: rank 1 (host " + std::string(host) + ", pid " + victim_line.substr(7) +
                       ") sent no heartbeat for ");
  EXPECT_HAS(text, "run.stall_timeout = 3.0 s");
  EXPECT_HAS(text, "run again with --resume");
  EXPECT_FALSE(fs::exists(out));
  // The journal kept what was finished: --resume continues from it.
  r = run_process(mpirun(2) + kBin + " " + (dir / "ppl.toml").string() + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "resuming: ");
  EXPECT_EQ(r.output.find("resuming: 0 work items"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out));
  fs::remove_all(dir);
}

TEST(InputLimits, AVeryLongPromptIsRefusedBeforeTheRunNamingItAndTheNumbers) {
  const fs::path dir = make_temp_dir("evalrun-longprompt");
  auto r = run_process(kBin + " make-model --preset tiny-llama --seed 2 --out " + (dir / "llama").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    std::ofstream f(dir / "prompts.jsonl");
    f << "{\"id\": \"short\", \"prompt\": \"the river rose\"}\n{\"id\": \"huge\", \"prompt\": \"";
    for (int i = 0; i < 300000; ++i) f << "river ";
    f << "\"}\n";
  }
  std::ofstream(dir / "gen.toml") << "[run]\nname = \"g\"\nthreads = 1\n[model]\npath = \"" << (dir / "llama").string()
                                  << "\"\n[task]\nkind = \"generate\"\ndataset = \"" << (dir / "prompts.jsonl").string()
                                  << "\"\nmax_new_tokens = 4\nbatch_size = 1\n[output]\npath = \""
                                  << (dir / "g.h5").string() << "\"\n";
  // The default limit (half this machine's memory) is far below the ~1.3 TB of attention scores.
  r = run_process(mpirun(2) + kBin + " " + (dir / "gen.toml").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, (dir / "prompts.jsonl").string() + ": prompt 'huge': a batch of 1 sequences of its length "
                       "(300003 tokens + 4 new) needs about 1.34e+03 GiB");
  EXPECT_HAS(r.output, "more than run.max_batch_bytes allows");
  // Rotary positions: past max_position_embeddings is a warning with the count, as in transformers.
  EXPECT_HAS(r.output, "1 of 1 prompts (with max_new_tokens) on this rank run past the model's "
                       "max_position_embeddings = 512");
  EXPECT_FALSE(fs::exists(dir / "g.h5"));
  fs::remove_all(dir);
}

}  // namespace

// The ranks' own logits rows (written into the run's rows file as each batch ends, io/rank_rows.hpp)
// overflow the disk during the run: one clean failure, the earlier result kept, no temporary file
// left beside it; --resume then completes the rows file (the journaled items' rows are in it).
TEST_F(DiskFull, RanksRowsWriteFailsThenResumeFinishes) {
  SmallDisk disk(dir_ / "disk-c", 8192);
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const fs::path out = disk.dir / "out.h5";
  const std::string full = "--set output.logits=full --set task.max_samples=40";
  auto r = run_process(mpirun(2) + run_cmd(dir_ / "full-ref.h5", full));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string before = earlier_result(out);
  leave_free(disk.dir, 64);  // 256 KiB: the journal's records fit, 40 windows of logits rows do not
  r = run_process(mpirun(2) + run_cmd(out, full));
  expect_one_clean_failure(r, out.string());
  EXPECT_HAS(r.output, "/logits/full rows");
  EXPECT_HAS(r.output, ".rows.h5)");
  EXPECT_TRUE(bytes_of(out) == before) << "the earlier result file changed";
  for (const auto& e : fs::directory_iterator(disk.dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "temporary file left: " << e.path();
  }
  fs::remove(disk.dir / "filler");
  r = run_process(mpirun(2) + run_cmd(out, full + " --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "resuming: ");
  EXPECT_FALSE(fs::exists(disk.dir / "out.h5.journal"));
  evalrun::H5Reader a((dir_ / "full-ref.h5").string()), b(out.string());
  EXPECT_EQ(a.shape("/logits/full"), b.shape("/logits/full"));
  const auto la = a.read_f32("/logits/full"), lb = b.read_f32("/logits/full");
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  float worst = 0;
  for (std::size_t i = 0; i < la.size(); ++i) worst = std::max(worst, std::fabs(la[i] - lb[i]));
  EXPECT_LE(worst, 1e-5F);
}
