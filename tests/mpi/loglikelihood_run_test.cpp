// task.kind = "loglikelihood" through the real binary under mpirun: the result file does not depend on
// the number of ranks, the batch size or tensor parallelism (identical token ids, num_tokens and
// is_greedy, log-likelihoods within 1e-5), and a bad data line is exit 2 naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class LoglikRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-loglik-run");
    auto r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / "tiny-llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_config("ll.toml", kSrc + "/data/demo_loglikelihood.jsonl");
    std::ofstream(dir_ / "bad.jsonl") << "{\"context\": \"a\", \"continuation\": \" b\"}\n\n"
                                      << "{\"context\": \"the cat\"}\n";
    write_config("bad.toml", (dir_ / "bad.jsonl").string());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static void write_config(const std::string& name, const std::string& dataset) {
    std::ofstream(dir_ / name) << "[run]\nname = \"ll\"\nthreads = 1\n[model]\npath = \""
                               << (dir_ / "tiny-llama").string() << "\"\n[task]\nkind = \"loglikelihood\"\ndataset = \""
                               << dataset << "\"\n";
  }

  static std::string run(int ranks, const std::string& out, int batch, const std::string& extra = "") {
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / "ll.toml").string() + " --set output.path=" +
                         quote((dir_ / out).string()) + " --set task.batch_size=" + std::to_string(batch) + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
};

TEST_F(LoglikRun, ResultsIndependentOfRanksAndBatchSize) {
  const auto ref = run(1, "n1-b1.h5", 1);
  H5Reader a(ref);
  const auto ids = a.read_strings("/samples/id");
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids[0], "capital");
  const auto la = a.read_f64("/loglikelihood/value");
  const auto na = a.read_i64("/loglikelihood/num_tokens");
  const auto cont = a.read_ragged_i64("/requests/continuation_ids");
  ASSERT_EQ(la.size(), 8u);
  for (std::size_t i = 0; i < la.size(); ++i) {
    EXPECT_LT(la[i], 0.0) << i;
    EXPECT_EQ(na[i], static_cast<std::int64_t>(cont[i].size())) << i;
    EXPECT_GT(na[i], 0) << i;
  }
  // the context's trailing space moves to the continuation: both spellings are the same request
  EXPECT_EQ(cont[0], cont[1]);
  EXPECT_EQ(a.read_ragged_i64("/requests/context_ids")[0], a.read_ragged_i64("/requests/context_ids")[1]);
  EXPECT_DOUBLE_EQ(la[0], la[1]);
  // (ranks, batch size, tensor-parallel degree)
  const std::vector<std::tuple<int, int, int>> layouts = {{1, 8, 1}, {2, 1, 1}, {2, 8, 1}, {2, 3, 1}, {2, 8, 2}};
  for (const auto& [ranks, batch, tp] : layouts) {
    std::string name = "n";  // appended piece by piece: GCC 12's -Wrestrict misfires on "n" + std::string
    name += std::to_string(ranks);
    name += "-b";
    name += std::to_string(batch);
    name += "-tp";
    name += std::to_string(tp);
    name += ".h5";
    H5Reader b(run(ranks, name, batch, " --set parallel.tensor_parallel=" + std::to_string(tp)));
    EXPECT_EQ(b.read_strings("/samples/id"), ids) << name;
    EXPECT_EQ(b.read_ragged_i64("/requests/continuation_ids"), cont) << name;
    EXPECT_EQ(b.read_ragged_i64("/requests/context_ids"), a.read_ragged_i64("/requests/context_ids")) << name;
    EXPECT_EQ(b.read_i64("/loglikelihood/num_tokens"), na) << name;
    EXPECT_EQ(b.read_i64("/loglikelihood/is_greedy"), a.read_i64("/loglikelihood/is_greedy")) << name;
    const auto lb = b.read_f64("/loglikelihood/value");
    ASSERT_EQ(lb.size(), la.size());
    for (std::size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5) << name << " request " << i;
  }
}

TEST_F(LoglikRun, CompareOfTwoRunsPassesAndOtherRequestsAreRefused) {
  const auto a = run(1, "c-n1-b1.h5", 1);
  const auto b = run(2, "c-n2-b8.h5", 8);
  auto r = run_process(kBin + " compare " + quote(a) + " " + quote(b));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("loglik_diff_max"), std::string::npos) << r.output;
  // the same ids, one request with another context: other token ids, not comparable (exit 2 naming it)
  {
    std::ifstream in(kSrc + "/data/demo_loglikelihood.jsonl");
    std::ofstream out(dir_ / "other.jsonl");
    std::string line;
    for (int i = 0; std::getline(in, line); ++i) {
      if (i == 2) {
        line = "{\"id\": \"river\", \"context\": \"A river\", \"continuation\": \" sails around the island.\"}";
      }
      out << line << "\n";
    }
  }
  write_config("other.toml", (dir_ / "other.jsonl").string());
  auto o = run_process(kBin + " " + (dir_ / "other.toml").string() + " --set output.path=" +
                       quote((dir_ / "other.h5").string()));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  auto c = run_process(kBin + " compare " + quote(a) + " " + quote((dir_ / "other.h5").string()));
  EXPECT_EQ(c.exit_code, 2) << c.output;
  EXPECT_NE(c.output.find("request 'river' has other context or continuation token ids"), std::string::npos)
      << c.output;
}

TEST_F(LoglikRun, MissingContinuationIsExit2NamingFileAndLine) {
  auto r = run_process(mpirun(2) + kBin + " " + (dir_ / "bad.toml").string() + " --set output.path=" +
                       quote((dir_ / "never.h5").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((dir_ / "bad.jsonl").string() + ":3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"continuation\""), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
}

TEST_F(LoglikRun, LogitsOutputIsRefused) {
  auto r = run_process(kBin + " " + (dir_ / "ll.toml").string() + " --set output.logits=full --set output.path=" +
                       quote((dir_ / "never2.h5").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("output.logits"), std::string::npos) << r.output;
}

}  // namespace
