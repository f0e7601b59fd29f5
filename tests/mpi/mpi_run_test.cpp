// The result file must not depend on the number of ranks, the batch size or padding: identical
// predictions and token ids, logits within 1e-5. Real mpirun, real checkpoints from `evalrun make-model`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class MpiRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-mpi");
    for (const char* head : {"qa", "mlm"}) {
      auto r = run_process(kBin + " make-model --head " + head + " --preset tiny --seed 7 --out " +
                           (dir_ / (std::string("tiny-") + head)).string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    std::ofstream(dir_ / "qa.toml") << "[run]\nname = \"qa\"\nthreads = 1\n[model]\npath = \"" +
                                            (dir_ / "tiny-qa").string() + "\"\n[task]\nkind = \"qa\"\ndataset = \"" +
                                            kSrc + "/data/demo_squad.json\"\nmax_seq_length = 96\ndoc_stride = 32\n";
    std::ofstream(dir_ / "mlm.toml") << "[run]\nname = \"mlm\"\nthreads = 1\n[model]\npath = \"" +
                                             (dir_ / "tiny-mlm").string() + "\"\n[task]\nkind = \"mlm\"\ndataset = \"" +
                                             kSrc + "/data/demo_mlm.jsonl\"\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string run(const std::string& config, int ranks, const std::string& out, const std::string& extra) {
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / config).string() + " --set output.path=" +
                         quote((dir_ / out).string()) + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, tol) << what;
}

}  // namespace

TEST_F(MpiRun, QaFileIndependentOfRanksBatchAndPadding) {
  const auto ref = run("qa.toml", 1, "qa-n1-b1.h5", "--set task.batch_size=1");
  const std::vector<std::string> others = {
      run("qa.toml", 2, "qa-n2-b3.h5", "--set task.batch_size=3"),
      run("qa.toml", 4, "qa-n4-b8.h5", "--set task.batch_size=8"),
      run("qa.toml", 8, "qa-n8-b2.h5", "--set task.batch_size=2"),
      run("qa.toml", 2, "qa-n2-pad.h5", "--set task.batch_size=4 --set task.pad_to_max_length=true"),
  };
  H5Reader a(ref);
  EXPECT_EQ(a.read_strings("/samples/id").size(), 14u);
  EXPECT_GT(a.shape("/features/example_index")[0], 14) << "max_seq_length 96 must split some contexts";
  for (const auto& path : others) {
    H5Reader b(path);
    EXPECT_EQ(a.read_strings("/samples/id"), b.read_strings("/samples/id")) << path;
    EXPECT_EQ(a.read_u64("/features/example_index"), b.read_u64("/features/example_index")) << path;
    EXPECT_EQ(a.read_i64("/features/input_ids/values"), b.read_i64("/features/input_ids/values")) << path;
    EXPECT_EQ(a.read_strings("/predictions/text"), b.read_strings("/predictions/text")) << path;
    EXPECT_EQ(a.read_strings("/predictions/nbest/text"), b.read_strings("/predictions/nbest/text")) << path;
    expect_close(a.read_f32("/logits/start_logits/values"), b.read_f32("/logits/start_logits/values"), 1e-5F, path);
    expect_close(a.read_f32("/logits/end_logits/values"), b.read_f32("/logits/end_logits/values"), 1e-5F, path);
    EXPECT_DOUBLE_EQ(a.attr_double("/metrics", "f1"), b.attr_double("/metrics", "f1")) << path;
  }
  H5Reader four(others[1]);
  EXPECT_EQ(four.attr_int("/", "world_size"), 4);
  EXPECT_EQ(H5Reader(others[2]).attr_int("/", "world_size"), 8);
}

TEST_F(MpiRun, MlmFileIndependentOfRanksAndBatch) {
  const auto ref = run("mlm.toml", 1, "mlm-n1-b1.h5", "--set task.batch_size=1");
  const auto other = run("mlm.toml", 4, "mlm-n4-b2.h5", "--set task.batch_size=2");
  H5Reader a(ref), b(other);
  EXPECT_EQ(a.read_i64("/predictions/token_ids"), b.read_i64("/predictions/token_ids"));
  EXPECT_EQ(a.read_strings("/predictions/filled_text"), b.read_strings("/predictions/filled_text"));
  expect_close(a.read_f32("/logits/mask_logits"), b.read_f32("/logits/mask_logits"), 1e-5F, "mask_logits");
  EXPECT_EQ(a.shape("/logits/mask_logits")[0], 5);  // 5 masks in the demo set
}

TEST_F(MpiRun, BadConfigStopsEveryRankWithStatus2) {
  std::ofstream(dir_ / "bad.toml") << "[run]\nname = \"bad\"\n[model]\npath = \"" + (dir_ / "tiny-qa").string() +
                                          "\"\n[task]\nkind = \"qa\"\ndataset = \"/nonexistent.json\"\n";
  auto r = run_process(mpirun(2) + kBin + " " + (dir_ / "bad.toml").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent.json"), std::string::npos) << r.output;
}

TEST_F(MpiRun, FailedRunLeavesEarlierResultUntouched) {
  const auto good = run("mlm.toml", 1, "keep.h5", "");
  std::ifstream in(good, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), {});
  // same output path, a model whose architecture cannot run the task: fails after the file exists
  auto r = run_process(mpirun(2) + kBin + " " + (dir_ / "mlm.toml").string() + " --set output.path=" + good +
                       " --set model.path=" + (dir_ / "tiny-qa").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  std::ifstream again(good, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(again)), {});
  EXPECT_EQ(before, after);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary file left: " << e.path();
  }
}
