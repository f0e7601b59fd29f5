// GPTQ W4A16: settings parsing, tensor validation, and GptqLinear against a float product with
// weights dequantized here, independently of the layer (torch's float16 conversion, double sums,
// the formula of the oracle's reference_dequant_note), on random packed data.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "quant/gptq.hpp"
#include "ops/isa.hpp"
#include "quant/quant_config.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using quant::GptqSettings;
using quant::GptqTensors;

// ---- settings ----------------------------------------------------------------------------------

nlohmann::json autogptq(int bits = 4) {
  return {{"bits", bits},   {"group_size", 32}, {"desc_act", true},          {"sym", false},
          {"damp_percent", 0.01}, {"static_groups", false}, {"quant_method", "gptq"}, {"checkpoint_format", "gptq"}};
}

std::string parse_error(const nlohmann::json& j) {
  try {
    quant::parse_gptq_settings(j, "/m/quantize_config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(GptqSettings, ParsesAutoGptqConfig) {
  const GptqSettings s = quant::parse_gptq_settings(autogptq(), "/m/quantize_config.json");
  EXPECT_EQ(s.bits, 4);
  EXPECT_EQ(s.group_size, 32);
  EXPECT_TRUE(s.desc_act);
  EXPECT_FALSE(s.sym);
  EXPECT_FALSE(s.v2);
  EXPECT_EQ(s.describe(), "gptq w4 g32 asym act_order");
  auto j = autogptq();
  j["checkpoint_format"] = "gptq_v2";
  j["group_size"] = -1;
  j["sym"] = true;
  j["desc_act"] = false;
  const GptqSettings v2 = quant::parse_gptq_settings(j, "w");
  EXPECT_TRUE(v2.v2);
  EXPECT_EQ(v2.group_size, -1);
  EXPECT_EQ(v2.describe(), "gptq_v2 w4 g-1 sym");
  // to_json round-trips
  const GptqSettings back = quant::parse_gptq_settings(nlohmann::json::parse(v2.to_json().dump()), "w");
  EXPECT_EQ(back.describe(), v2.describe());
}

TEST(GptqSettings, RefusesOtherBitWidthsAndFormats) {
  std::string e = parse_error(autogptq(3));
  EXPECT_NE(e.find("bits"), std::string::npos) << e;
  EXPECT_NE(e.find("3-bit"), std::string::npos) << e;
  EXPECT_NE(parse_error(autogptq(8)).find("bits"), std::string::npos);

  for (const char* format : {"marlin", "gptq_marlin", "awq", "bitblas"}) {
    auto j = autogptq();
    j["checkpoint_format"] = format;
    e = parse_error(j);
    EXPECT_NE(e.find("checkpoint_format"), std::string::npos) << e;
    EXPECT_NE(e.find(format), std::string::npos) << e;
  }
  auto j = autogptq();
  j.erase("checkpoint_format");
  j["format"] = "marlin";  // GPTQModel's key
  EXPECT_NE(parse_error(j).find("format"), std::string::npos);
  j = autogptq();
  j["is_marlin_format"] = true;  // AutoGPTQ <= 0.7
  EXPECT_NE(parse_error(j).find("is_marlin_format"), std::string::npos);
  j = autogptq();
  j["quant_method"] = "awq";
  EXPECT_NE(parse_error(j).find("quant_method"), std::string::npos);
  j = autogptq();
  j["group_size"] = 0;
  EXPECT_NE(parse_error(j).find("group_size"), std::string::npos);
  j = autogptq();
  j.erase("bits");
  EXPECT_NE(parse_error(j).find("bits"), std::string::npos);
  j = autogptq();
  j["sym"] = "yes";
  EXPECT_NE(parse_error(j).find("sym"), std::string::npos);
  j = autogptq();
  j["lm_head"] = true;
  EXPECT_NE(parse_error(j).find("lm_head"), std::string::npos);
}

TEST(GptqSettings, ReadFromCheckpointFiles) {
  const fs::path dir = testing::make_temp_dir("evalrun-gptq-cfg");
  // quantize_config.json alone (AutoGPTQ before quant_method existed)
  auto j = autogptq();
  j.erase("quant_method");
  std::ofstream(dir / "quantize_config.json") << j.dump();
  quant::QuantConfig q = quant::read_quant_config(dir.string());
  EXPECT_EQ(q.method, quant::Method::gptq);
  EXPECT_EQ(q.describe(), "gptq w4 g32 asym act_order");
  // config.json wins; a marlin format there is an error naming config.json and the key
  nlohmann::json cfg = {{"model_type", "llama"}, {"quantization_config", autogptq()}};
  cfg["quantization_config"]["checkpoint_format"] = "marlin";
  std::ofstream(dir / "config.json") << cfg.dump();
  try {
    quant::read_quant_config(dir.string());
    ADD_FAILURE() << "marlin accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("config.json"), std::string::npos) << what;
    EXPECT_NE(what.find("quantization_config.checkpoint_format"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

// ---- random packed layers and their independent dequantization ----------------------------------

struct Case {
  std::int64_t in, out, group_size;
  bool sym, desc_act, v2, bias, f32_scales = false, omit_g_idx = false;
};

GptqTensors random_layer(const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t G = quant::gptq_groups(c.in, c.group_size);
  GptqTensors t;
  t.in = c.in;
  t.out = c.out;
  t.qweight.resize(c.in / 8 * c.out);
  for (auto& w : t.qweight) w = static_cast<std::int32_t>(static_cast<std::uint32_t>(rng()));
  t.qzeros.resize(G * c.out / 8);
  for (auto& w : t.qzeros) {
    // symmetric: the zero point is 8 (stored 7 in v1); asymmetric: any nibble
    w = c.sym ? static_cast<std::int32_t>((c.v2 ? 0x88888888u : 0x77777777u)) : static_cast<std::int32_t>(static_cast<std::uint32_t>(rng()));
  }
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  torch::Tensor s = torch::empty({G * c.out});
  for (std::int64_t i = 0; i < G * c.out; ++i) s[i] = scale(rng);
  torch::Tensor h = s.to(torch::kFloat16);
  if (c.f32_scales) {
    // float32 scales that are not all float16 values: they must be kept as float32
    torch::Tensor f = h.to(torch::kFloat32).contiguous();
    t.scales_f32.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    t.scales_f32[0] = 0.0123456789f;
  } else {
    t.scales_f16.resize(G * c.out);
    std::memcpy(t.scales_f16.data(), h.data_ptr(), 2 * t.scales_f16.size());
  }
  if (!c.omit_g_idx) {
    t.g_idx.resize(c.in);
    std::vector<std::int32_t> perm(c.in);
    for (std::int64_t i = 0; i < c.in; ++i) perm[i] = static_cast<std::int32_t>(i);
    if (c.desc_act) std::shuffle(perm.begin(), perm.end(), rng);
    const std::int64_t gs = c.group_size < 0 ? c.in : c.group_size;
    for (std::int64_t j = 0; j < c.in; ++j) t.g_idx[perm[j]] = static_cast<std::int32_t>(j / gs);
  }
  if (c.bias) {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    t.bias.resize(c.out);
    for (auto& b : t.bias) b = nd(rng);
  }
  return t;
}

// W [out, in] as the reference_dequant_note writes it.
std::vector<double> dequantize(const GptqTensors& t, const Case& c) {
  std::vector<double> w(t.out * t.in);
  torch::Tensor scales;
  if (!t.scales_f16.empty()) {
    torch::Tensor h = torch::empty({static_cast<std::int64_t>(t.scales_f16.size())}, torch::kFloat16);
    std::memcpy(h.data_ptr(), t.scales_f16.data(), 2 * t.scales_f16.size());
    scales = h.to(torch::kFloat64);
  } else {
    scales = torch::tensor(t.scales_f32).to(torch::kFloat64);
  }
  const double* sp = scales.data_ptr<double>();
  for (std::int64_t i = 0; i < t.in; ++i) {
    const std::int64_t g = c.omit_g_idx ? (c.group_size < 0 ? 0 : i / c.group_size) : t.g_idx[i];
    for (std::int64_t o = 0; o < t.out; ++o) {
      const std::uint32_t word = static_cast<std::uint32_t>(t.qweight[(i / 8) * t.out + o]);
      const int q = static_cast<int>((word >> (4 * (i % 8))) & 0xF);
      const std::uint32_t zword = static_cast<std::uint32_t>(t.qzeros[g * (t.out / 8) + o / 8]);
      const int z = static_cast<int>((zword >> (4 * (o % 8))) & 0xF) + (c.v2 ? 0 : 1);
      w[o * t.in + i] = sp[g * t.out + o] * (q - z);
    }
  }
  return w;
}

std::string name(const Case& c) {
  return "in " + std::to_string(c.in) + " out " + std::to_string(c.out) + " g" + std::to_string(c.group_size) +
         (c.sym ? " sym" : " asym") + (c.desc_act ? " act_order" : "") + (c.v2 ? " v2" : " v1") + (c.bias ? " bias" : "") +
         (c.f32_scales ? " f32 scales" : "") + (c.omit_g_idx ? " no g_idx" : "");
}

double worst_all = 0;  // largest relative error seen (printed)

// y = beta * y0 + alpha * (x W^T + b) against the double-precision product; the bound is float
// rounding of the sum: 1e-5 relative to sum |x| |W| (+ |b|).
void check_layer(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE(name(c));
  GptqSettings s;
  s.group_size = c.group_size;
  s.sym = c.sym;
  s.desc_act = c.desc_act;
  s.v2 = c.v2;
  const GptqTensors t = random_layer(c, seed);
  auto layer = quant::make_gptq_linear(t, s, "test", "layer");
  ASSERT_EQ(layer->in_features(), c.in);
  ASSERT_EQ(layer->out_features(), c.out);
  const std::vector<double> w = dequantize(t, c);

  // weight_f32 is the exact dequantization (a float16 scale times a small integer is exact in float).
  const std::vector<float> wf = layer->weight_f32();
  ASSERT_EQ(wf.size(), w.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < w.size(); ++i) mismatches += static_cast<double>(wf[i]) != w[i];
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(layer->bias_f32(), t.bias);

  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::int64_t M : {1, 2, 3, 5, 8, 9, 33, 64}) {
    for (int variant = 0; variant < 3; ++variant) {
      // variant 1: strided x and y, alpha 0.5, beta 1 (accumulate into y); variant 2: x with a large
      // common offset (the zero points' share, z * sum(x), nearly cancels x . q)
      const std::int64_t ldx = c.in + (variant == 1 ? 3 : 0), ldy = c.out + (variant == 1 ? 5 : 0);
      const float alpha = variant == 1 ? 0.5f : 1.0f, beta = variant == 1 ? 1.0f : 0.0f;
      std::vector<float> x(M * ldx), y(M * ldy);
      for (auto& v : x) v = nd(rng) + (variant == 2 ? 20.0f : 0.0f);
      for (auto& v : y) v = variant == 1 ? nd(rng) : std::nanf("");  // beta 0 must ignore y
      const std::vector<float> y0 = y;
      layer->forward(x.data(), M, ldx, y.data(), ldy, alpha, beta);
      double worst = 0;
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t o = 0; o < c.out; ++o) {
          double acc = 0, mag = 0;
          for (std::int64_t i = 0; i < c.in; ++i) {
            acc += static_cast<double>(x[m * ldx + i]) * w[o * c.in + i];
            mag += std::fabs(static_cast<double>(x[m * ldx + i]) * w[o * c.in + i]);
          }
          if (c.bias) acc += t.bias[o], mag += std::fabs(t.bias[o]);
          const double want = (beta != 0 ? y0[m * ldy + o] : 0.0) + alpha * acc;
          const double err = std::fabs(y[m * ldy + o] - want) / (mag * alpha + 1e-30);
          worst = std::max(worst, err);
          worst_all = std::max(worst_all, err);
          ASSERT_LE(err, 1e-5) << "M " << M << " variant " << variant << " row " << m << " col " << o << ": "
                               << y[m * ldy + o] << " vs " << want;
        }
        // columns past out in a strided y are untouched
        for (std::int64_t o = c.out; o < ldy; ++o) ASSERT_EQ(y[m * ldy + o], y0[m * ldy + o]);
      }
    }
  }
}

TEST(GptqLinear, MatchesDequantizedFloatProduct) {
  std::uint64_t seed = 100;
  for (bool sym : {false, true}) {
    for (bool desc_act : {false, true}) {
      for (bool v2 : {false, true}) {
        for (std::int64_t gs : {32, 128, -1}) {
          check_layer({256, 48, gs, sym, desc_act, v2, (seed % 2) == 0}, seed);
          ++seed;
        }
      }
    }
  }
  std::printf("largest error relative to sum |x| |W|: %.3g\n", worst_all);
}

TEST(GptqLinear, EveryKernelVersionMatches) {
  for (ops::Isa isa : ops::isas_of_this_cpu()) {
    SCOPED_TRACE(ops::to_string(isa));
    const ops::ScopedIsaCap cap(isa);
    check_layer({256, 48, 32, false, true, false, true}, 40);
    check_layer({64, 40, 20, true, true, true, false}, 41);
  }
}

TEST(GptqLinear, OddShapesAndStorage) {
  // out not a multiple of 16 (a padded block), group size not a multiple of 8 (groups that start
  // inside a packed word), a last group shorter than the others, float32 scales, g_idx omitted.
  check_layer({64, 40, 20, false, false, false, true}, 1);
  check_layer({64, 40, 20, false, true, true, false}, 2);
  check_layer({96, 24, 12, true, true, false, true}, 3);
  check_layer({128, 32, 32, false, true, false, false, true}, 4);
  check_layer({128, 32, 32, false, false, true, true, false, true}, 5);
  check_layer({1024, 64, 128, false, true, false, false}, 6);  // several K tiles on the sgemm path
}

TEST(GptqLinear, ExportedTensorsLoadBackIdentically) {
  const fs::path dir = testing::make_temp_dir("evalrun-gptq-export");
  for (bool desc_act : {false, true}) {
    Case c{64, 40, 16, false, desc_act, false, true};
    GptqSettings s;
    s.group_size = 16;
    s.sym = false;
    s.desc_act = desc_act;
    const GptqTensors t = random_layer(c, 7);
    auto layer = quant::make_gptq_linear(t, s, "test", "layer");
    std::vector<TensorToWrite> tensors;
    layer->export_tensors("l", tensors);
    write_safetensors((dir / "model.safetensors").string(), tensors);
    // The exported qweight, qzeros, scales and g_idx are the input tensors themselves.
    auto same = [](const TensorToWrite& w, const void* want, std::size_t bytes) {
      return w.data.size() == bytes && std::memcmp(w.data.data(), want, bytes) == 0;
    };
    for (const auto& w : tensors) {
      if (w.name == "l.qweight") {
        EXPECT_TRUE(same(w, t.qweight.data(), 4 * t.qweight.size()));
      } else if (w.name == "l.qzeros") {
        EXPECT_TRUE(same(w, t.qzeros.data(), 4 * t.qzeros.size()));
      } else if (w.name == "l.scales") {
        EXPECT_TRUE(same(w, t.scales_f16.data(), 2 * t.scales_f16.size()));
      } else if (w.name == "l.g_idx") {
        EXPECT_TRUE(same(w, t.g_idx.data(), 4 * t.g_idx.size()));
      }
    }
    Checkpoint ckpt(dir.string());
    std::set<std::string> used;
    auto back = quant::load_gptq_linear(ckpt, "l", 64, 40, s, used);
    EXPECT_EQ(used.size(), 5u);
    EXPECT_EQ(back->weight_f32(), layer->weight_f32());
    EXPECT_EQ(back->bias_f32(), layer->bias_f32());
  }
  fs::remove_all(dir);
}

// ---- checkpoint validation ----------------------------------------------------------------------

class GptqLoad : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-gptq-load"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a valid layer "l" (in 64, out 32, group 32, act-order), lets `edit` break it, loads it.
  std::string load_error(const std::function<void(std::vector<TensorToWrite>&)>& edit, bool desc_act = true) {
    Case c{64, 32, 32, false, true, false, false};
    GptqSettings s;
    s.group_size = 32;
    s.sym = false;
    s.desc_act = desc_act;
    auto layer = quant::make_gptq_linear(random_layer(c, 3), s, "test", "l");
    std::vector<TensorToWrite> tensors;
    layer->export_tensors("l", tensors);
    edit(tensors);
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
    Checkpoint ckpt(dir_.string());
    std::set<std::string> used;
    try {
      quant::load_gptq_linear(ckpt, "l", 64, 32, s, used);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  static TensorToWrite& find(std::vector<TensorToWrite>& ts, const std::string& name) {
    for (auto& t : ts) {
      if (t.name == name) return t;
    }
    throw std::logic_error("no " + name);
  }

  fs::path dir_;
};

TEST_F(GptqLoad, ValidLayerLoads) { EXPECT_EQ(load_error([](auto&) {}), ""); }

TEST_F(GptqLoad, GIdxOutOfRange) {
  const std::string e = load_error([](auto& ts) {
    auto& g = find(ts, "l.g_idx");
    const std::int32_t bad = 2;  // 2 groups: 0 and 1
    std::memcpy(g.data.data() + 4 * 5, &bad, 4);
  });
  EXPECT_NE(e.find("'l.g_idx'"), std::string::npos) << e;
  EXPECT_NE(e.find("g_idx[5] = 2"), std::string::npos) << e;
  const std::string neg = load_error([](auto& ts) {
    const std::int32_t bad = -1;
    std::memcpy(find(ts, "l.g_idx").data.data(), &bad, 4);
  });
  EXPECT_NE(neg.find("g_idx[0] = -1"), std::string::npos) << neg;
}

TEST_F(GptqLoad, WrongShapes) {
  std::string e = load_error([](auto& ts) {
    auto& q = find(ts, "l.qweight");
    q.shape = {4, 64};  // same bytes, transposed-looking shape
  });
  EXPECT_NE(e.find("'l.qweight'"), std::string::npos) << e;
  EXPECT_NE(e.find("shape [4, 64], expected [8, 32]"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& z = find(ts, "l.qzeros");
    z.shape = {1, 8};
  });
  EXPECT_NE(e.find("'l.qzeros'"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& s = find(ts, "l.scales");
    s.shape = {32, 2};
  });
  EXPECT_NE(e.find("'l.scales'"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& g = find(ts, "l.g_idx");
    g.shape = {32};
    g.data.resize(128);
  });
  EXPECT_NE(e.find("'l.g_idx'"), std::string::npos) << e;
}

TEST_F(GptqLoad, WrongDtypes) {
  std::string e = load_error([](auto& ts) { find(ts, "l.qweight").dtype = TensorDType::F32; });
  EXPECT_NE(e.find("'l.qweight'"), std::string::npos) << e;
  EXPECT_NE(e.find("dtype F32, expected I32"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& s = find(ts, "l.scales");
    s.dtype = TensorDType::I16;
  });
  EXPECT_NE(e.find("'l.scales'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected F16 or F32"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& s = find(ts, "l.scales");
    const std::uint16_t inf = 0x7c00;
    std::memcpy(s.data.data() + 6, &inf, 2);
  });
  EXPECT_NE(e.find("not finite"), std::string::npos) << e;
}

TEST_F(GptqLoad, MissingTensors) {
  std::string e = load_error([](auto& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "l.g_idx"; }), ts.end());
  });
  EXPECT_NE(e.find("'l.g_idx'"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  // Without act-order g_idx may be absent (then i / group_size).
  e = load_error(
      [](auto& ts) {
        ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "l.g_idx"; }), ts.end());
      },
      false);
  EXPECT_EQ(e, "");
  e = load_error([](auto& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "l.scales"; }), ts.end());
  });
  EXPECT_NE(e.find("'l.scales'"), std::string::npos) << e;
}

// ---- memory -------------------------------------------------------------------------------------

// The layer shapes of a 110M Llama (hidden 768, 12 heads, 4 kv heads, intermediate 2048): the packed
// layer holds at most 0.3x the bytes of its float16 weights, act-order included.
TEST(GptqLinear, ResidentMemoryAtMostThreeTenthsOfFloat16) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{768, 768}, {768, 256}, {768, 2048}, {2048, 768}};
  for (std::int64_t gs : {128, 32}) {
    for (bool desc_act : {false, true}) {
      for (auto [in, out] : shapes) {
        const Case c{in, out, gs, false, desc_act, false, false};
        GptqSettings s;
        s.group_size = gs;
        s.sym = false;
        s.desc_act = desc_act;
        auto layer = quant::make_gptq_linear(random_layer(c, 11), s, "test", "l");
        const double fp16 = 2.0 * in * out;
        const double ratio = static_cast<double>(layer->resident_bytes()) / fp16;
        EXPECT_LE(ratio, 0.3) << name(c);
        // and no less than the 4-bit weights themselves: the number is honest
        EXPECT_GE(ratio, 0.25) << name(c);
        if (gs == 128 && !desc_act && in == 768 && out == 768) std::printf("768x768 g128: %.4f x fp16\n", ratio);
        if (gs == 32 && desc_act && in == 768 && out == 256) std::printf("768x256 g32 act_order: %.4f x fp16\n", ratio);
      }
    }
  }
}

}  // namespace
}  // namespace evalrun
