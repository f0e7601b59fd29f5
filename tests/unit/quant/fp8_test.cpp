// FP8 e4m3: the byte decoding against a formula written independently (exhaustively), rounding
// (ties to even, saturation) against a nearest-value search, settings and tensor validation, and
// Fp8Linear against a double-precision product of the dequantized weights and activations that are
// rounded here by that search.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "quant/fp8.hpp"
#include "quant/fp8_kernels.hpp"
#include "ops/isa.hpp"
#include "quant/quant_config.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using quant::Fp8Settings;
using quant::Fp8Tensors;

// e4m3 as the OCP FP8 specification states it: (-1)^S * 2^(max(E,1) - 7) * (implicit + M / 8), the
// implicit bit 1 for E > 0; E = 15 with M = 7 is NaN, there are no infinities.
double e4m3_reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = std::pow(2.0, std::max(e, 1) - 7) * ((e > 0 ? 1.0 : 0.0) + m / 8.0);
  return s ? -v : v;
}

// The e4m3 value nearest to v by search over every finite code: ties to the even code, saturating
// at +-448. The activation rounding of the layer must agree with this.
double nearest_e4m3(double v) {
  if (std::isnan(v)) return v;
  double best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7F; ++c) {
    const double d = std::fabs(std::fabs(v) - e4m3_reference(c));
    if (d < best_d || (d == best_d && c % 2 == 0)) {
      best_d = d;
      best = e4m3_reference(c);
    }
  }
  if (std::fabs(v) >= 448.0) best = 448.0;
  return std::copysign(best, v);
}

TEST(E4m3, DecodesEveryCodeAsTheSpecificationSays) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float got = quant::e4m3_to_float(static_cast<std::uint8_t>(c));
    const double want = e4m3_reference(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      ++nans;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), c >= 128) << c;
    }
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_EQ(quant::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(quant::e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(quant::e4m3_to_float(0x01), 0x1p-9f);   // smallest subnormal
  EXPECT_EQ(quant::e4m3_to_float(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(quant::e4m3_to_float(0x08), 0x1p-6f);   // smallest normal
  EXPECT_EQ(quant::e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(quant::e4m3_to_float(0x3C), 1.5f);
  EXPECT_EQ(quant::e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(quant::e4m3_to_float(0xC4), -3.0f);
  // Finite values increase with the code: 0 .. 448.
  for (int c = 1; c < 0x7F; ++c) EXPECT_LT(quant::e4m3_to_float(c - 1), quant::e4m3_to_float(c)) << c;
}

TEST(E4m3, EncodesToNearestEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(quant::float_to_e4m3(quant::e4m3_to_float(c)), c) << c;  // exact values round-trip
  }
  for (int c = 0; c + 1 < 0x7F; ++c) {
    const double lo = e4m3_reference(c), hi = e4m3_reference(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(quant::float_to_e4m3(mid), even) << "midpoint above code " << c;
    EXPECT_EQ(quant::float_to_e4m3(-mid), 0x80 | even) << c;
    EXPECT_EQ(quant::float_to_e4m3(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(quant::float_to_e4m3(std::nextafter(mid, 1000.0f)), c + 1) << c;
  }
  EXPECT_EQ(quant::float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(quant::float_to_e4m3(470.0f), 0x7E);  // nearer to 480, which e4m3 does not have
  EXPECT_EQ(quant::float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(quant::float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(quant::float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(quant::float_to_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(quant::float_to_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie to even (0)
  EXPECT_EQ(quant::float_to_e4m3(0x1.1p-10f), 0x01);
  EXPECT_EQ(quant::float_to_e4m3(3 * 0x1p-10f), 0x02);  // 1.5 x 2^-9: tie to even (2 x 2^-9)
}

TEST(E4m3, RoundingAgreesWithNearestValueSearch) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exponent(-13.0, 10.0);
  for (int i = 0; i < 20000; ++i) {
    const float v = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
    const float got = quant::round_to_e4m3(v);
    ASSERT_EQ(static_cast<double>(got), nearest_e4m3(v)) << v;
    ASSERT_EQ(got, quant::e4m3_to_float(quant::float_to_e4m3(v))) << v;
  }
}

// The vectorized kernels give exactly the scalar definitions' values (every code; random values over
// all magnitudes, rows of odd lengths so that the scalar tails run too).
void kernels_equal_scalar_definitions();

TEST(E4m3, VectorKernelsEqualScalarDefinitions) {
  for (ops::Isa isa : ops::isas_of_this_cpu()) {
    SCOPED_TRACE(ops::to_string(isa));
    const ops::ScopedIsaCap cap(isa);
    kernels_equal_scalar_definitions();
  }
}

void kernels_equal_scalar_definitions() {
  std::vector<std::uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<std::uint8_t>(c));
  }
  const std::int64_t n = static_cast<std::int64_t>(codes.size());  // 254: 15 vectors and a tail
  const float scales[2] = {1.0f, 0.0123f};
  std::vector<float> out(2 * n);
  std::vector<std::uint8_t> two_rows(codes);
  two_rows.insert(two_rows.end(), codes.begin(), codes.end());
  quant::fp8_kernels::dequantize_rows(two_rows.data(), 2, n, scales, 1, out.data());
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], quant::e4m3_to_float(codes[i])) << int(codes[i]);
    ASSERT_EQ(out[n + i], quant::e4m3_to_float(codes[i]) * 0.0123f) << int(codes[i]);
  }
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> exponent(-14.0, 10.0);
  const std::int64_t rows = 40, in = 509;
  std::vector<float> x(rows * in), q(rows * in);
  for (auto& v : x) v = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 0.0f;
  x[5] = -0.0f;
  quant::fp8_kernels::round_rows(x.data(), rows, in, in, 1.0f, q.data());
  for (std::int64_t i = 0; i < rows * in; ++i) {
    ASSERT_EQ(q[i], quant::round_to_e4m3(x[i])) << x[i];
    ASSERT_EQ(std::signbit(q[i]), std::signbit(x[i])) << x[i];
  }
  // dynamic: per row, max |x| / 448
  quant::fp8_kernels::round_rows(x.data() + in, 1, in, in, 0.0f, q.data());
  float amax = 0;
  for (std::int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(x[in + k]));
  for (std::int64_t k = 0; k < in; ++k) ASSERT_EQ(q[k], quant::round_to_e4m3(x[in + k] / (amax / 448.0f)) * (amax / 448.0f));
}

// ---- settings -----------------------------------------------------------------------------------

std::string parse_error(const nlohmann::json& j) {
  try {
    quant::parse_fp8_settings(j, "/m/config.json: quantization_config");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8Settings, ParsesAndRefuses) {
  EXPECT_FALSE(quant::parse_fp8_settings({{"quant_method", "fp8"}}, "w").static_activations);
  const Fp8Settings s = quant::parse_fp8_settings(
      {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}}, "w");
  EXPECT_TRUE(s.static_activations);
  EXPECT_EQ(s.describe(), "fp8 e4m3 static");
  EXPECT_EQ(quant::parse_fp8_settings(nlohmann::json::parse(s.to_json().dump()), "w").describe(), s.describe());
  std::string e = parse_error({{"quant_method", "fp8"}, {"activation_scheme", "per_token"}});
  EXPECT_NE(e.find("quantization_config.activation_scheme"), std::string::npos) << e;
  e = parse_error({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}});
  EXPECT_NE(e.find("weight_block_size"), std::string::npos) << e;
  e = parse_error({{"quant_method", "fp8"}, {"fmt", "e5m2"}});
  EXPECT_NE(e.find("fmt"), std::string::npos) << e;
  // through the checkpoint's config.json
  const fs::path dir = testing::make_temp_dir("evalrun-fp8-cfg");
  std::ofstream(dir / "config.json") << nlohmann::json{{"quantization_config", {{"quant_method", "fp8"}}}}.dump();
  EXPECT_EQ(quant::read_quant_config(dir.string()).describe(), "fp8 e4m3 dynamic");
  fs::remove_all(dir);
}

// ---- the layer ----------------------------------------------------------------------------------

struct Case {
  std::int64_t in, out;
  bool per_channel, static_act, bias;
};

Fp8Tensors random_layer(const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp8Tensors t;
  t.in = c.in;
  t.out = c.out;
  t.weight.resize(c.in * c.out);
  for (auto& w : t.weight) {
    do {
      w = static_cast<std::uint8_t>(rng());
    } while ((w & 0x7F) == 0x7F);
  }
  std::uniform_real_distribution<float> scale(1e-4f, 2e-3f);
  t.weight_scale.resize(c.per_channel ? c.out : 1);
  for (auto& s : t.weight_scale) s = scale(rng);
  if (c.static_act) t.input_scale = 0.004f;  // |x| up to ~5 -> up to 1250 / 448: some saturate
  if (c.bias) {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    t.bias.resize(c.out);
    for (auto& b : t.bias) b = nd(rng);
  }
  return t;
}

void check_layer(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE("in " + std::to_string(c.in) + " out " + std::to_string(c.out) + (c.per_channel ? " per-channel" : " per-tensor") +
               (c.static_act ? " static" : " dynamic") + (c.bias ? " bias" : ""));
  Fp8Settings s;
  s.static_activations = c.static_act;
  const Fp8Tensors t = random_layer(c, seed);
  auto layer = quant::make_fp8_linear(t, s, "test", "l");
  // W = e4m3 * scale, rounded once to float
  std::vector<float> w(c.in * c.out);
  for (std::int64_t o = 0; o < c.out; ++o) {
    for (std::int64_t i = 0; i < c.in; ++i) {
      const double v = e4m3_reference(t.weight[o * c.in + i]) * t.weight_scale[c.per_channel ? o : 0];
      w[o * c.in + i] = static_cast<float>(v);
    }
  }
  EXPECT_EQ(layer->weight_f32(), w);
  EXPECT_LE(layer->resident_bytes(), static_cast<std::size_t>(c.in * c.out + 4 * c.out + 4 * c.out + 4));

  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (std::int64_t M : {1, 3, 6, 64}) {
    const std::int64_t ldx = c.in + 2, ldy = c.out + 3;
    std::vector<float> x(M * ldx), y(M * ldy, std::nanf(""));
    for (auto& v : x) v = nd(rng);
    layer->forward(x.data(), M, ldx, y.data(), ldy, 1.0f, 0.0f);
    for (std::int64_t m = 0; m < M; ++m) {
      float s_x = t.input_scale;
      if (!c.static_act) {
        float amax = 0;
        for (std::int64_t i = 0; i < c.in; ++i) amax = std::max(amax, std::fabs(x[m * ldx + i]));
        s_x = amax / 448.0f;
      }
      std::vector<float> xq(c.in);
      for (std::int64_t i = 0; i < c.in; ++i) xq[i] = static_cast<float>(nearest_e4m3(x[m * ldx + i] / s_x)) * s_x;
      for (std::int64_t o = 0; o < c.out; ++o) {
        double acc = c.bias ? t.bias[o] : 0.0, mag = c.bias ? std::fabs(t.bias[o]) : 0.0;
        for (std::int64_t i = 0; i < c.in; ++i) {
          acc += static_cast<double>(xq[i]) * w[o * c.in + i];
          mag += std::fabs(static_cast<double>(xq[i]) * w[o * c.in + i]);
        }
        ASSERT_LE(std::fabs(y[m * ldy + o] - acc), 1e-5 * mag + 1e-30) << "M " << M << " row " << m << " col " << o;
      }
    }
  }
}

TEST(Fp8Linear, MatchesDequantizedProductWithRoundedActivations) {
  for (ops::Isa isa : ops::isas_of_this_cpu()) {
    SCOPED_TRACE(ops::to_string(isa));
    const ops::ScopedIsaCap cap(isa);
    std::uint64_t seed = 1;
    for (bool per_channel : {false, true}) {
      for (bool static_act : {false, true}) {
        for (bool bias : {false, true}) check_layer({96, 80, per_channel, static_act, bias}, seed++);
      }
    }
    check_layer({768, 130, true, false, true}, seed++);  // several output tiles, the last one partial
  }
}

TEST(Fp8Linear, ResidentBytesAreAboutOneBytePerWeight) {
  auto layer = quant::make_fp8_linear(random_layer({768, 2048, true, false, false}, 3), Fp8Settings{}, "test", "l");
  const double ratio = static_cast<double>(layer->resident_bytes()) / (2.0 * 768 * 2048);
  EXPECT_GE(ratio, 0.5);
  EXPECT_LE(ratio, 0.51);
}

class Fp8Load : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-fp8-load"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string load_error(const std::function<void(std::vector<TensorToWrite>&)>& edit, bool static_act = true) {
    Fp8Settings s;
    s.static_activations = static_act;
    auto layer = quant::make_fp8_linear(random_layer({32, 16, true, true, true}, 9), s, "test", "l");
    std::vector<TensorToWrite> tensors;
    layer->export_tensors("l", tensors);
    edit(tensors);
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
    Checkpoint ckpt(dir_.string());
    std::set<std::string> used;
    try {
      auto back = quant::load_fp8_linear(ckpt, "l", 32, 16, s, used);
      EXPECT_EQ(back->weight_f32(), layer->weight_f32());
      EXPECT_EQ(back->bias_f32(), layer->bias_f32());
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
  static void erase(std::vector<TensorToWrite>& ts, const std::string& name) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const auto& t) { return t.name == name; }), ts.end());
  }

  fs::path dir_;
};

TEST_F(Fp8Load, RoundTripAndErrors) {
  EXPECT_EQ(load_error([](auto&) {}), "");
  // per-channel scales as [out]
  EXPECT_EQ(load_error([](auto& ts) { find(ts, "l.weight_scale").shape = {16}; }), "");
  std::string e = load_error([](auto& ts) { find(ts, "l.weight").data[37] = std::byte{0xFF}; });
  EXPECT_NE(e.find("'l.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("NaN"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 5]"), std::string::npos) << e;
  e = load_error([](auto& ts) { find(ts, "l.weight").dtype = TensorDType::F8_E5M2; });
  EXPECT_NE(e.find("'l.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("F8_E5M2"), std::string::npos) << e;
  e = load_error([](auto& ts) { find(ts, "l.weight").shape = {32, 16}; });
  EXPECT_NE(e.find("shape [32, 16], expected [16, 32]"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    auto& s = find(ts, "l.weight_scale");
    s.shape = {2, 8};
  });
  EXPECT_NE(e.find("'l.weight_scale'"), std::string::npos) << e;
  e = load_error([](auto& ts) { erase(ts, "l.input_scale"); });
  EXPECT_NE(e.find("'l.input_scale'"), std::string::npos) << e;
  e = load_error([](auto& ts) { erase(ts, "l.weight_scale"); });
  EXPECT_NE(e.find("'l.weight_scale'"), std::string::npos) << e;
  e = load_error([](auto& ts) {
    const float zero = 0.0f;
    std::memcpy(find(ts, "l.input_scale").data.data(), &zero, 4);
  });
  EXPECT_NE(e.find("'l.input_scale'"), std::string::npos) << e;
}

}  // namespace
}  // namespace evalrun
