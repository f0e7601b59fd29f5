// model.device = "aiu" end to end: the real binary under mpirun -n 2 runs QA and generation with its
// projections through the CPU reference plugin (src/device/plugins/cpu_reference.c) and must give
// the CPU run's answers and tokens, logits within 1e-5; each rank's plugin session records that it did
// the work. Also the set-up errors and `--dry-run`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;
const std::string kPlugin = CPU_PLUGIN;
// Two cards, as the AIU login scripts would describe them.
const std::string kCards = "AIU_WORLD_RANK_0=0000:1a:00.0 AIU_WORLD_RANK_1=0000:1b:00.0 ";

class DeviceRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-device");
    auto r = run_process(kBin + " make-model --head qa --preset tiny --seed 7 --out " + (dir_ / "tiny-qa").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / "tiny-llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir_ / "qa.toml") << "[run]\nname = \"qa\"\nthreads = 1\n[model]\npath = \"" +
                                            (dir_ / "tiny-qa").string() + "\"\n[task]\nkind = \"qa\"\ndataset = \"" +
                                            kSrc + "/data/demo_squad.json\"\nmax_seq_length = 96\ndoc_stride = 32\n";
    std::ofstream(dir_ / "gen.toml") << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \"" +
                                             (dir_ / "tiny-llama").string() + "\"\n[task]\nkind = \"generate\"\ndataset = \"" +
                                             kSrc + "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static ProcessResult run(const std::string& env, const std::string& config, const std::string& out,
                           const std::string& extra, int ranks = 2) {
    return run_process("env " + env + " " + mpirun(ranks) + kBin + " " + (dir_ / config).string() +
                       " --set output.path=" + quote((dir_ / out).string()) + " " + extra);
  }

  // rank<r>.txt written by the plugin at shutdown: "key value" lines.
  static std::map<std::string, std::string> trace(const fs::path& dir, int rank) {
    std::map<std::string, std::string> kv;
    std::ifstream in(dir / ("rank" + std::to_string(rank) + ".txt"));
    std::string k, v;
    while (in >> k >> v) kv[k] = v;
    return kv;
  }

  static inline fs::path dir_;
};

void expect_plugin_did_the_work(const fs::path& trace_dir, const std::map<std::string, std::string>& r0,
                                const std::map<std::string, std::string>& r1) {
  for (const auto* t : {&r0, &r1}) {
    ASSERT_TRUE(t->count("calls")) << trace_dir;
    EXPECT_GT(std::stoll(t->at("calls")), 0);
    EXPECT_GT(std::stoll(t->at("layers")), 0);
    EXPECT_EQ(t->at("live_layers"), "0");  // every layer destroyed before the session closed
  }
  EXPECT_EQ(r0.at("card"), "0000:1a:00.0");
  EXPECT_EQ(r1.at("card"), "0000:1b:00.0");
}

}  // namespace

TEST_F(DeviceRun, QaThroughThePluginAnswersLikeTheCpu) {
  auto r = run("", "qa.toml", "cpu.h5", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path traces = dir_ / "qa-trace";
  fs::create_directories(traces);
  r = run(kCards + "EVALRUN_CPU_PLUGIN_TRACE=" + traces.string(), "qa.toml", "aiu.h5",
          "--set model.device=aiu --set aiu.plugin=" + quote(kPlugin) + " --set task.batch_size=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("aiu: environment set by evalrun: FLEX_COMPUTE=SENTIENT FLEX_DEVICE=PF\n"), std::string::npos)
      << r.output;  // no decoder variables for RoBERTa
  H5Reader a(dir_ / "cpu.h5"), b(dir_ / "aiu.h5");
  EXPECT_EQ(a.read_strings("/predictions/text"), b.read_strings("/predictions/text"));
  EXPECT_EQ(a.read_strings("/predictions/nbest/text"), b.read_strings("/predictions/nbest/text"));
  EXPECT_LE(max_diff(a.read_f32("/logits/start_logits/values"), b.read_f32("/logits/start_logits/values")), 1e-5F);
  EXPECT_LE(max_diff(a.read_f32("/logits/end_logits/values"), b.read_f32("/logits/end_logits/values")), 1e-5F);
  EXPECT_EQ(a.attr_string("/", "device"), "cpu");
  EXPECT_EQ(b.attr_string("/", "device"), "aiu");
  EXPECT_EQ(b.attr_string("/", "compute_dtype"), "float32");
  const std::string detail = b.attr_string("/", "device_detail");
  EXPECT_NE(detail.find("evalrun-cpu-reference 1.0, ABI 1"), std::string::npos) << detail;
  EXPECT_NE(detail.find("card 0000:1a:00.0"), std::string::npos) << detail;
  EXPECT_NE(detail.find("forward calls"), std::string::npos) << detail;
  expect_plugin_did_the_work(traces, trace(traces, 0), trace(traces, 1));
  // 2 tiny layers x 4 projections per rank
  EXPECT_EQ(trace(traces, 0).at("layers"), "8");
}

TEST_F(DeviceRun, GenerationThroughThePluginGivesTheCpuTokens) {
  auto r = run("", "gen.toml", "gcpu.h5", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path traces = dir_ / "gen-trace";
  fs::create_directories(traces);
  // The plugin from the environment; the user's FLEX_DEVICE wins over aiu.vfio_mode.
  r = run(kCards + "FLEX_DEVICE=VF EVALRUN_AIU_PLUGIN=" + quote(kPlugin) + " EVALRUN_CPU_PLUGIN_TRACE=" + traces.string(),
          "gen.toml", "gaiu.h5", "--set model.device=aiu --set task.batch_size=2 --set aiu.compile_dynamic=symbolic");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("set by evalrun: FLEX_COMPUTE=SENTIENT DTCOMPILER_KEEP_EXPORT=true COMPILATION_MODE=offline_decoder"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("kept as the user set it: FLEX_DEVICE=VF AIU_WORLD_RANK_0=0000:1a:00.0"), std::string::npos)
      << r.output;
  H5Reader a(dir_ / "gcpu.h5"), b(dir_ / "gaiu.h5");
  EXPECT_EQ(a.read_i64("/generated/ids/values"), b.read_i64("/generated/ids/values"));
  EXPECT_EQ(a.read_u64("/generated/ids/offsets"), b.read_u64("/generated/ids/offsets"));
  EXPECT_EQ(a.read_strings("/generated/text"), b.read_strings("/generated/text"));
  EXPECT_LE(max_diff(a.read_f32("/logits/step_logits"), b.read_f32("/logits/step_logits")), 1e-5F);
  EXPECT_EQ(b.attr_string("/", "device"), "aiu");
  EXPECT_NE(b.attr_string("/", "device_detail").find("compile_dynamic symbolic"), std::string::npos)
      << b.attr_string("/", "device_detail");
  expect_plugin_did_the_work(traces, trace(traces, 0), trace(traces, 1));
}

TEST_F(DeviceRun, SetUpProblemsAreOneClearError) {
  struct Case {
    std::string env, extra, expect;
  };
  const std::vector<Case> cases = {
      {kCards, "--set model.device=aiu", "aiu.plugin"},
      {kCards, "--set model.device=aiu --set aiu.plugin=/nonexistent/libaiu.so", "/nonexistent/libaiu.so"},
      {"AIU_WORLD_RANK_0=0000:1a:00.0", "--set model.device=aiu --set aiu.plugin=" + quote(kPlugin), "AIU_WORLD_RANK_1"},
      {kCards, "--set model.device=aiu --set model.dtype=bf16 --set aiu.plugin=" + quote(kPlugin), "model.dtype"},
  };
  for (const auto& c : cases) {
    auto r = run(c.env, "gen.toml", "never.h5", c.extra);
    EXPECT_EQ(r.exit_code, 2) << c.extra << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
  }
}

TEST_F(DeviceRun, CudaOnACpuOnlyBuildSaysHowToBuildIt) {
  auto r = run("", "qa.toml", "never.h5", "--set model.device=cuda", 1);
  if (r.output.find("CPU-only libtorch") == std::string::npos && r.exit_code == 0) GTEST_SKIP() << "a CUDA build";
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CMAKE_PREFIX_PATH"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
}

TEST_F(DeviceRun, DryRunPrintsEveryRanksPlanAndRunsNothing) {
  auto r = run(kCards, "gen.toml", "never.h5", "--dry-run --set model.device=aiu --set aiu.plugin=" + quote(kPlugin));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"layout    world 2 = 2 data-parallel x 1 tensor-parallel", "rank 0 of 2", "rank 1 of 2",
                           "card      0000:1b:00.0", "evalrun-cpu-reference 1.0, ABI 1",
                           "FLEX_COMPUTE=SENTIENT", "FLEX_DEVICE=PF", "DTCOMPILER_KEEP_EXPORT=true",
                           "COMPILATION_MODE=offline_decoder", "set by evalrun", "plan ok: 2 rank(s) ready"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));

  // An encoder: no decoder variables; the user's FLEX_DEVICE is kept and said so.
  r = run(kCards + "FLEX_DEVICE=VF", "qa.toml", "never.h5",
          "--dry-run --set model.device=aiu --set aiu.plugin=" + quote(kPlugin));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("DTCOMPILER_KEEP_EXPORT"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FLEX_DEVICE=VF"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kept from the environment"), std::string::npos) << r.output;

  // Problems on one rank: listed, exit 2.
  r = run("AIU_WORLD_RANK_0=0000:1a:00.0", "gen.toml", "never.h5",
          "--dry-run --set model.device=aiu --set aiu.plugin=/nonexistent/libaiu.so");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("PROBLEM   AIU_WORLD_RANK_1: not set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PROBLEM   aiu.plugin: AIU plugin '/nonexistent/libaiu.so'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("problem(s): the run would stop"), std::string::npos) << r.output;

  // The CPU default.
  r = run("", "qa.toml", "never.h5", "--dry-run", 1);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
}

TEST_F(DeviceRun, TensorParallelPartsRunThroughThePlugin) {
  // Each rank hands the plugin its own parts of the projections (tp 2): tokens equal the unsplit CPU
  // run's.
  auto r = run("", "gen.toml", "gen-cpu-tp1.h5", "", 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path traces = dir_ / "tp-trace";
  fs::create_directories(traces);
  r = run(kCards + "EVALRUN_CPU_PLUGIN_TRACE=" + traces.string(), "gen.toml", "gen-aiu-tp2.h5",
          "--set model.device=aiu --set aiu.plugin=" + quote(kPlugin) + " --set parallel.tensor_parallel=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  H5Reader a(dir_ / "gen-cpu-tp1.h5"), b(dir_ / "gen-aiu-tp2.h5");
  EXPECT_EQ(a.read_i64("/generated/ids/values"), b.read_i64("/generated/ids/values"));
  EXPECT_LE(max_diff(a.read_f32("/logits/step_logits"), b.read_f32("/logits/step_logits")), 1e-5F);
  EXPECT_EQ(b.attr_int("/", "tensor_parallel"), 2);
  expect_plugin_did_the_work(traces, trace(traces, 0), trace(traces, 1));
}
