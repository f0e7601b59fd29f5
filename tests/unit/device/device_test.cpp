// src/device: rank placement, the AIU environment plan, the plugin loader and its error paths, and a
// projection run through the CPU reference plugin against the host layer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "common/errors.hpp"
#include "config/config.hpp"
#include "device/aiu_env.hpp"
#include "device/backend.hpp"
#include "device/placement.hpp"
#include "quant/dense.hpp"

using namespace evalrun;
using namespace evalrun::device;

namespace {

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

RunSpec spec_for(const std::string& extra, const std::string& kind = "generate") {
  std::string text = "[run]\nname = \"t\"\n[model]\npath = \"m\"\ndevice = \"aiu\"\n[task]\nkind = \"" + kind +
                     "\"\ndataset = \"d\"\n" + extra;
  return parse_run_spec(text, "t.toml");
}

template <typename F>
InputError input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("", "");
}

const EnvSetting* find(const std::vector<EnvSetting>& vars, const std::string& name) {
  for (const auto& v : vars)
    if (v.name == name) return &v;
  return nullptr;
}

bool has_problem(const std::vector<Problem>& ps, const std::string& where, const std::string& text = "") {
  for (const auto& p : ps)
    if (p.where == where && p.what.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(Placement, LocalRankComesFromTheLauncherElseMpi) {
  EXPECT_EQ(resolve_local_rank(fake_env({}), 3), 3);
  EXPECT_EQ(resolve_local_rank(fake_env({{"SLURM_LOCALID", "2"}}), 0), 2);
  EXPECT_EQ(resolve_local_rank(fake_env({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_LOCALID", "2"}}), 0), 1);
  EXPECT_EQ(input_error([] { resolve_local_rank(fake_env({{"SLURM_LOCALID", "x1"}}), 0); }).where(), "SLURM_LOCALID");
  EXPECT_EQ(input_error([] { resolve_local_rank(fake_env({{"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}}), 0); }).where(),
            "OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST(Placement, CudaDeviceIsTheLocalRank) {
  EXPECT_EQ(cuda_device_index(0, 4, 8), 0);
  EXPECT_EQ(cuda_device_index(3, 4, 4), 3);
  EXPECT_EQ(cuda_device_index(1, 2, 1), 0);  // each rank sees its own single GPU
  EXPECT_EQ(input_error([] { cuda_device_index(0, 1, 0); }).where(), "model.device");
  EXPECT_NE(input_error([] { cuda_device_index(2, 4, 2); }).detail().find("4 ranks on this node but 2 CUDA devices"),
            std::string::npos);
  EXPECT_NE(input_error([] { cuda_device_index(5, 2, 4); }).detail().find("local rank 5"), std::string::npos);
}

TEST(AiuEnv, PciAddresses) {
  for (const char* ok : {"0000:1a:00.0", "1a:00.7", "ABCD:ef:1F.3"}) EXPECT_TRUE(is_pci_address(ok)) << ok;
  for (const char* bad : {"", "0000:1a:00", "0000:1a:00.8", "000:1a:00.0", "0000:1g:00.0", "1a-00.0", "0"})
    EXPECT_FALSE(is_pci_address(bad)) << bad;
}

TEST(AiuEnv, DecodersGetTheCompilerVariablesEncodersDoNot) {
  const auto env = fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}});
  const RankPlace one{0, 1, 0, 1};
  auto dec = plan_aiu_env(spec_for(""), one, env);
  EXPECT_TRUE(dec.problems.empty());
  ASSERT_NE(find(dec.vars, "FLEX_COMPUTE"), nullptr);
  EXPECT_EQ(find(dec.vars, "FLEX_COMPUTE")->value, "SENTIENT");
  EXPECT_EQ(find(dec.vars, "FLEX_DEVICE")->value, "PF");  // the default
  EXPECT_FALSE(find(dec.vars, "FLEX_DEVICE")->from_user);
  ASSERT_NE(find(dec.vars, "DTCOMPILER_KEEP_EXPORT"), nullptr);
  EXPECT_EQ(find(dec.vars, "DTCOMPILER_KEEP_EXPORT")->value, "true");
  EXPECT_EQ(find(dec.vars, "COMPILATION_MODE")->value, "offline_decoder");
  EXPECT_EQ(dec.card, "0000:1a:00.0");
  EXPECT_TRUE(find(dec.vars, "AIU_WORLD_RANK_0")->from_user);

  auto enc = plan_aiu_env(spec_for("[aiu]\nvfio_mode = \"VF\"\n", "qa"), one, env);
  EXPECT_TRUE(enc.problems.empty());
  EXPECT_EQ(find(enc.vars, "FLEX_DEVICE")->value, "VF");
  EXPECT_EQ(find(enc.vars, "DTCOMPILER_KEEP_EXPORT"), nullptr);
  EXPECT_EQ(find(enc.vars, "COMPILATION_MODE"), nullptr);
  EXPECT_TRUE(enc.notes.empty());
  // Set by the user for an encoder: kept, with a warning that it breaks RoBERTa.
  auto user = plan_aiu_env(spec_for("", "mlm"),
                           one, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"DTCOMPILER_KEEP_EXPORT", "true"}}));
  ASSERT_EQ(user.notes.size(), 1u);
  EXPECT_NE(user.notes[0].find("breaks encoder"), std::string::npos) << user.notes[0];
}

TEST(AiuEnv, TheUsersVariablesWin) {
  auto plan = plan_aiu_env(spec_for(""), {0, 1, 0, 1},
                           fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"FLEX_DEVICE", "VF"}, {"FLEX_COMPUTE", "SENTIENT"}}));
  EXPECT_EQ(find(plan.vars, "FLEX_DEVICE")->value, "VF");
  EXPECT_TRUE(find(plan.vars, "FLEX_DEVICE")->from_user);
  EXPECT_TRUE(find(plan.vars, "FLEX_COMPUTE")->from_user);
  ASSERT_EQ(plan.notes.size(), 1u);  // only the one that differs from evalrun's choice
  EXPECT_NE(plan.notes[0].find("FLEX_DEVICE=VF from the environment is kept"), std::string::npos) << plan.notes[0];

  // apply: setenv without overwrite, on the real process environment.
  ::setenv("FLEX_DEVICE", "VF", 1);
  ::unsetenv("FLEX_COMPUTE");
  ::unsetenv("COMPILATION_MODE");
  auto real = plan_aiu_env(spec_for(""), {0, 1, 0, 1}, [](const std::string& n) -> std::optional<std::string> {
    if (n == "AIU_WORLD_RANK_0") return "0000:1a:00.0";
    const char* v = std::getenv(n.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
  apply_aiu_env(real.vars);
  EXPECT_STREQ(std::getenv("FLEX_DEVICE"), "VF");
  EXPECT_STREQ(std::getenv("FLEX_COMPUTE"), "SENTIENT");
  EXPECT_STREQ(std::getenv("COMPILATION_MODE"), "offline_decoder");
  for (const char* n : {"FLEX_DEVICE", "FLEX_COMPUTE", "COMPILATION_MODE", "DTCOMPILER_KEEP_EXPORT"}) ::unsetenv(n);
}

TEST(AiuEnv, EveryRankNeedsItsOwnCard) {
  const auto spec = spec_for("");
  // Local rank 1 of 2 without AIU_WORLD_RANK_1.
  auto missing = plan_aiu_env(spec, {1, 2, 1, 2}, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}}));
  EXPECT_TRUE(has_problem(missing.problems, "AIU_WORLD_RANK_1", "not set")) << missing.problems.size();
  EXPECT_TRUE(missing.card.empty());
  // Rank 0 of the same node is fine.
  EXPECT_TRUE(plan_aiu_env(spec, {0, 2, 0, 2}, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}})).problems.empty());
  // The local rank picks the variable, not the world rank (second node, local rank 0).
  EXPECT_EQ(plan_aiu_env(spec, {2, 4, 0, 2}, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"AIU_WORLD_RANK_1", "0000:1b:00.0"}})).card,
            "0000:1a:00.0");
  auto bad = plan_aiu_env(spec, {0, 1, 0, 1}, fake_env({{"AIU_WORLD_RANK_0", "card0"}}));
  EXPECT_TRUE(has_problem(bad.problems, "AIU_WORLD_RANK_0", "not a PCI address"));
  auto dup = plan_aiu_env(spec, {1, 2, 1, 2},
                          fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"AIU_WORLD_RANK_1", "0000:1a:00.0"}}));
  EXPECT_TRUE(has_problem(dup.problems, "AIU_WORLD_RANK_1", "both name card 0000:1a:00.0"));
  auto small = plan_aiu_env(spec, {0, 2, 0, 2},
                            fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"AIU_WORLD_RANK_1", "0000:1b:00.0"},
                                      {"AIU_WORLD_SIZE", "1"}}));
  EXPECT_TRUE(has_problem(small.problems, "AIU_WORLD_SIZE", "2 ranks"));
}

TEST(Plan, AiuNeedsAPluginFloatLayersAndNoBf16) {
  const auto env = fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}});
  auto none = plan_rank(spec_for(""), {}, env, true);
  EXPECT_TRUE(has_problem(none.problems, "aiu.plugin", "EVALRUN_AIU_PLUGIN"));
  auto from_env = plan_rank(spec_for(""), {}, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}, {"EVALRUN_AIU_PLUGIN", CPU_PLUGIN}}), true);
  EXPECT_TRUE(from_env.problems.empty()) << from_env.problems.front().what;
  EXPECT_EQ(from_env.plugin_from, "EVALRUN_AIU_PLUGIN");
  EXPECT_EQ(from_env.plugin_identity, "evalrun-cpu-reference 1.0, ABI 1");
  EXPECT_NE(from_env.compute.find("projections float32 through the plugin"), std::string::npos) << from_env.compute;
  auto bf16 = plan_rank(parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\ndevice = \"aiu\"\ndtype = \"bf16\"\n"
                                      "[task]\nkind = \"qa\"\ndataset = \"d\"\n[quantization]\nmethod = \"gptq\"\n",
                                      "t.toml"),
                       {}, env, false);
  EXPECT_TRUE(has_problem(bf16.problems, "model.dtype", "bf16"));
  EXPECT_TRUE(has_problem(bf16.problems, "quantization.method", "float checkpoints only"));
  // The aiu keys belong to aiu runs.
  auto e = input_error([] {
    parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\n[task]\nkind = \"qa\"\ndataset = \"d\"\n[aiu]\nvfio_mode = \"VF\"\n",
                   "t.toml");
  });
  EXPECT_NE(std::string(e.what()).find("aiu.vfio_mode applies only to model.device = \"aiu\""), std::string::npos) << e.what();
}

TEST(Plan, CudaInACpuOnlyBuildSaysHowToBuildIt) {
  if (built_with_cuda()) GTEST_SKIP() << "this build has CUDA";
  auto spec = parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\ndevice = \"cuda\"\n[task]\nkind = \"qa\"\ndataset = \"d\"\n",
                             "t.toml");
  auto plan = plan_rank(spec, {}, fake_env({}), false);
  EXPECT_TRUE(has_problem(plan.problems, "model.device", "CPU-only libtorch")) << plan.problems.size();
  EXPECT_TRUE(has_problem(plan.problems, "model.device", "CMAKE_PREFIX_PATH"));
  auto e = input_error([&] { open_backend(spec, {}); });
  EXPECT_EQ(e.where(), "model.device");
}

TEST(Plan, CudaRunsTheWholeModelInEveryDtypeFloatOrGptq) {
  // What the plan says beside "not built with CUDA" holds for a CUDA build as well.
  auto plan = [](const std::string& extra) {
    return plan_rank(parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\ndevice = \"cuda\"\n" + extra +
                                        "[task]\nkind = \"generate\"\nprompt_set = \"chat\"\n",
                                    "t.toml"),
                     {}, fake_env({}), false);
  };
  for (const auto& [dtype, compute] : {std::pair<std::string, std::string>{"fp32", "float32"},
                                       {"fp16", "float16"},
                                       {"bf16", "bfloat16"}}) {
    auto p = plan("dtype = \"" + dtype + "\"\n");
    EXPECT_FALSE(has_problem(p.problems, "model.dtype", "")) << dtype;
    EXPECT_NE(p.compute.find("the whole model " + compute + " on cuda"), std::string::npos) << p.compute;
    EXPECT_NE(p.compute.find("KV cache"), std::string::npos) << p.compute;
  }
  // GPTQ runs dequantized at load; INT8, FP8, direct quantization and an INT8 lm_head do not.
  EXPECT_FALSE(has_problem(plan("[quantization]\nmethod = \"gptq\"\n").problems, "quantization.method", ""));
  for (const std::string q : {"method = \"int8\"", "method = \"fp8\"", "method = \"int8\"\ndirect = true"}) {
    auto p = plan("[quantization]\n" + q + "\n");
    EXPECT_TRUE(has_problem(p.problems, "quantization.method", "float checkpoints and GPTQ ones only")) << q;
  }
  auto head = plan("[quantization]\nlm_head = \"int8\"\n");
  EXPECT_TRUE(has_problem(head.problems, "quantization.lm_head", "INT8 kernel runs on the host"));
  EXPECT_FALSE(has_problem(plan("").problems, "quantization.method", ""));
}

TEST(Plugin, LoaderErrorsNameThePathAndTheReason) {
  struct Case {
    std::string path, expect;
  };
  const std::vector<Case> cases = {
      {"/nonexistent/libnothing.so", "cannot be loaded"},
      {BAD_PLUGIN_NO_ENTRY, "has no symbol evalrun_aiu_get_api"},
      {BAD_PLUGIN_ABI_99, "implements plugin ABI version 99, this evalrun needs version 1"},
      {BAD_PLUGIN_NULL_FORWARD, "its API table has no linear_forward"},
  };
  for (const auto& c : cases) {
    auto spec = spec_for("[aiu]\nplugin = \"" + c.path + "\"\n");
    auto plan = plan_rank(spec, {}, fake_env({{"AIU_WORLD_RANK_0", "0000:1a:00.0"}}), true);
    ASSERT_EQ(plan.problems.size(), 1u) << c.path;
    EXPECT_EQ(plan.problems[0].where, "aiu.plugin");
    EXPECT_NE(plan.problems[0].what.find(c.path), std::string::npos) << plan.problems[0].what;
    EXPECT_NE(plan.problems[0].what.find(c.expect), std::string::npos) << plan.problems[0].what;
  }
}

// A projection through the CPU reference plugin computes what the host layer computes, for strided
// inputs and outputs and both accumulation modes the models use.
TEST(Plugin, ProjectionThroughThePluginMatchesTheHostLayer) {
  ::setenv("AIU_WORLD_RANK_0", "0000:1a:00.0", 1);
  auto spec = spec_for("[aiu]\nplugin = \"" + std::string(CPU_PLUGIN) + "\"\n");
  auto backend = open_backend(spec, {});
  EXPECT_EQ(backend->device(), "aiu");
  EXPECT_TRUE(backend->takes_projections());
  EXPECT_EQ(backend->compute_dtype("float32"), "float32");
  EXPECT_EQ(backend->compute_dtype("bfloat16"), "bfloat16 (projections float32)");

  const std::int64_t in = 37, out = 19, M = 5, ldx = 41, ldy = 23;
  torch::manual_seed(3);
  const auto w = torch::randn({out, in}), b = torch::randn({out});
  const auto x = torch::randn({M, ldx});
  auto make_host = [&] { return std::make_unique<quant::DenseLinear>(w, b, true); };
  // Sites as a model holds them, replaced through the model's hook.
  std::vector<quant::LinearPtr> layers;
  layers.push_back(make_host());
  std::vector<quant::LinearSite> sites = {{{"layers.0.q", "layers.0.k"}, {10, 9}, layers[0].get()}};
  take_over_projections(*backend, sites,
                        [&](std::size_t i, quant::LinearPtr l) { std::swap(layers[i], l); return l; }, "none");
  EXPECT_EQ(layers[0]->describe(), make_host()->describe() + " on aiu");
  auto host = make_host();
  for (float beta : {0.0f, 1.0f}) {
    const auto y0 = torch::randn({M, ldy});
    auto want = y0.clone(), got = y0.clone();
    host->forward(x.data_ptr<float>(), M, ldx, want.data_ptr<float>(), ldy, 0.5f, beta);
    layers[0]->forward(x.data_ptr<float>(), M, ldx, got.data_ptr<float>(), ldy, 0.5f, beta);
    EXPECT_LT((want - got).abs().max().item<float>(), 1e-5f);
    // columns past `out` are not the layer's
    EXPECT_TRUE(torch::equal(got.slice(1, out), y0.slice(1, out)));
  }
  EXPECT_EQ(layers[0]->weight_f32(), host->weight_f32());
  EXPECT_NE(backend->usage().find("1 layers, 2 forward calls, 10 rows"), std::string::npos) << backend->usage();
  // A quantized model is refused by name.
  auto e = input_error([&] { take_over_projections(*backend, sites, [](std::size_t, quant::LinearPtr l) { return l; }, "gptq w4 g128 sym"); });
  EXPECT_EQ(e.where(), "quantization.method");
  ::unsetenv("AIU_WORLD_RANK_0");
  for (const char* n : {"FLEX_DEVICE", "FLEX_COMPUTE", "COMPILATION_MODE", "DTCOMPILER_KEEP_EXPORT"}) ::unsetenv(n);
}

TEST(Plugin, CpuBackendKeepsTheHostLayers) {
  auto spec = parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\n[task]\nkind = \"qa\"\ndataset = \"d\"\n", "t.toml");
  auto backend = open_backend(spec, {});
  EXPECT_EQ(backend->device(), "cpu");
  EXPECT_FALSE(backend->takes_projections());
  EXPECT_EQ(backend->compute_dtype("bfloat16"), "bfloat16");
  bool replaced = false;
  take_over_projections(*backend, {}, [&](std::size_t, quant::LinearPtr l) { replaced = true; return l; }, "gptq");
  EXPECT_FALSE(replaced);
}
