// Faults through the real binary under mpirun: a rank killed by a signal mid-run ends the whole job
// within seconds (no rank left waiting in a collective), and the earlier result file at the same
// output path survives byte for byte.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace
