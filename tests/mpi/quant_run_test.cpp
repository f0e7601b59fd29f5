// Quantized checkpoints written by `evalrun make-model` and run by the real binary under mpirun: the
// result records the quantization, and tokens and logits do not depend on ranks, batch size or padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/hdf5_file.hpp"
#include "ops/gemm.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class QuantRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = make_temp_dir("evalrun-quant-run"); }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // make-model with `flags` into dir_/name, and a generate config for it.
  static void make(const std::string& name, const std::string& flags) {
    auto r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / name).string() + " " + flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir_ / (name + ".toml")) << "[run]\nname = \"q\"\nthreads = 1\n[model]\npath = \"" << (dir_ / name).string()
                                           << "\"\n[task]\nkind = \"generate\"\ndataset = \"" << kSrc
                                           << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\n";
  }
  static std::string run(const std::string& name, int ranks, const std::string& out, const std::string& extra) {
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / (name + ".toml")).string() + " --set output.path=" +
                         quote((dir_ / out).string()) + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
};

void expect_same_generation(const std::string& ref, const std::string& other) {
  H5Reader a(ref), b(other);
  EXPECT_EQ(a.read_i64("/generated/ids/values"), b.read_i64("/generated/ids/values")) << other;
  EXPECT_EQ(a.read_u64("/generated/ids/offsets"), b.read_u64("/generated/ids/offsets")) << other;
  EXPECT_EQ(a.read_strings("/generated/text"), b.read_strings("/generated/text")) << other;
  EXPECT_LE(max_diff(a.read_f32("/logits/step_logits"), b.read_f32("/logits/step_logits")), 1e-5F) << other;
}

}  // namespace

TEST_F(QuantRun, GptqCheckpointFromMakeModelGenerates) {
  make("gptq", "--gptq --group-size 32 --desc-act");
  // AutoGPTQ's settings file
  {
    std::ifstream q(dir_ / "gptq" / "quantize_config.json");
    std::string text((std::istreambuf_iterator<char>(q)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"desc_act\": true"), std::string::npos) << text;
    EXPECT_NE(text.find("\"group_size\": 32"), std::string::npos) << text;
  }
  const auto ref = run("gptq", 1, "g-n1-b1.h5", "--set task.batch_size=1");
  expect_same_generation(ref, run("gptq", 2, "g-n2-b3.h5", "--set task.batch_size=3 --set quantization.method=gptq"));
  expect_same_generation(ref, run("gptq", 2, "g-pad.h5", "--set task.batch_size=5 --set task.min_pad_length=40"));
  H5Reader h(ref);
  EXPECT_EQ(h.attr_string("/", "quantization"), "gptq w4 g32 asym act_order");
  EXPECT_EQ(h.read_strings("/samples/id").size(), 5u);

  // The float checkpoint of the same seed: 4-bit rounding moved the weights, so the logits differ.
  make("float", "");
  const auto f = run("float", 1, "f.h5", "");
  H5Reader fh(f);
  EXPECT_EQ(fh.attr_string("/", "quantization"), "none");
  const auto lq = h.read_f32("/logits/step_logits"), lf = fh.read_f32("/logits/step_logits");
  // (compared over the first step of the first prompt, which both runs have)
  const std::size_t V = static_cast<std::size_t>(h.shape("/logits/step_logits")[1]);
  EXPECT_GT(max_diff(std::vector<float>(lq.begin(), lq.begin() + V), std::vector<float>(lf.begin(), lf.begin() + V)), 1e-3F);
}

TEST_F(QuantRun, GptqMethodMismatchAndBadFlagsAreErrors) {
  make("gptq2", "--gptq --sym --gptq-format gptq_v2");
  auto r = run_process(kBin + " " + (dir_ / "gptq2.toml").string() + " --set quantization.method=none --set output.path=" +
                       (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("quantization.method"), std::string::npos) << r.output;
  r = run_process(kBin + " make-model --preset tiny-llama --desc-act --out " + (dir_ / "never").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--desc-act"), std::string::npos) << r.output;
  const auto ok = run("gptq2", 1, "v2.h5", "");
  EXPECT_EQ(H5Reader(ok).attr_string("/", "quantization"), "gptq_v2 w4 g128 sym");
}

TEST_F(QuantRun, Fp8CheckpointFromMakeModelGenerates) {
  make("fp8", "--fp8 --fp8-scale per-channel --fp8-activations static");
  const auto ref = run("fp8", 1, "f8-n1-b1.h5", "--set task.batch_size=1");
  expect_same_generation(ref, run("fp8", 2, "f8-n2-b3.h5", "--set task.batch_size=3 --set quantization.method=fp8"));
  H5Reader h(ref);
  EXPECT_EQ(h.attr_string("/", "quantization"), "fp8 e4m3 static");
  auto r = run_process(kBin + " make-model --preset tiny-llama --fp8 --gptq --out " + (dir_ / "never").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_process(kBin + " make-model --preset tiny-llama --fp8-scale per-channel --out " + (dir_ / "never").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fp8-scale"), std::string::npos) << r.output;
}

// quantization.lm_head = "int8" on a GPTQ checkpoint: the output projection in INT8 W8A8 (per-token
// activations: rows independent), so tokens and logits do not depend on ranks, tensor parallelism,
// batch size or padding; the logits move by the rounding only, and the weights shrink by the lm_head's
// float bytes less its int8 bytes.
TEST_F(QuantRun, Int8LmHeadIsIndependentOfLayoutAndCloseToTheFloatHead) {
  make("gptq-head", "--gptq --group-size 32");
  const auto ref = run("gptq-head", 1, "h-n1-b1.h5", "--set task.batch_size=1 --set quantization.lm_head=int8");
  expect_same_generation(ref, run("gptq-head", 2, "h-n2-b3.h5", "--set task.batch_size=3 --set quantization.lm_head=int8"));
  expect_same_generation(ref, run("gptq-head", 2, "h-tp2.h5", "--set parallel.tensor_parallel=2 --set quantization.lm_head=int8"));
  expect_same_generation(ref, run("gptq-head", 1, "h-pad.h5",
                                  "--set task.batch_size=5 --set task.min_pad_length=40 --set quantization.lm_head=int8"));
  const auto fl = run("gptq-head", 1, "h-float.h5", "--set task.batch_size=1");
  H5Reader q(ref), f(fl);
  EXPECT_EQ(q.attr_string("/", "quantization"),
            "gptq w4 g32 asym; lm_head int8 w8a8 weights per_channel, activations per_token (in memory)");
  // tiny-llama: vocab 1000, hidden 64, lm_head not tied: 256,000 float bytes become 64,000 int8, as
  // many again for the copy packed for oneDNN's integer GEMM where it runs (VNNI; counted at that size
  // until the first forward makes it), 4,000 bytes of row sums for the decode-step kernel and 2 x 4,000
  // bytes of row scales (Int8Linear keeps them as given and expanded per row)
  const std::int64_t packed = evalrun::ops::have_onednn_igemm() ? 64000 : 0;
  EXPECT_EQ(f.attr_int("/", "weight_bytes_per_rank") - q.attr_int("/", "weight_bytes_per_rank"),
            256000 - (76000 + packed));
  const auto lq = q.read_f32("/logits/step_logits"), lf = f.read_f32("/logits/step_logits");
  const std::size_t V = static_cast<std::size_t>(q.shape("/logits/step_logits")[1]);
  const std::vector<float> first_q(lq.begin(), lq.begin() + V), first_f(lf.begin(), lf.begin() + V);
  const float d = max_diff(first_q, first_f);
  EXPECT_GT(d, 1e-6F) << "the head was not quantized";
  EXPECT_LT(d, 0.05F);
  const auto r = run_process(kBin + " compare " + fl + " " + ref);  // tokens may diverge: 0 or 1, not 2
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("ce_excess_max"), std::string::npos) << r.output;
}
