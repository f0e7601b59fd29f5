// INT8 W8A8: the integer GEMM wrappers against an exact reference, Int8Linear in every weight /
// activation mode against an emulation of its integer arithmetic and against the float layer within
// the quantization error bound, SmoothQuant's scales and their folding, concatenated parts, the
// checkpoint format (round trip and refused inputs), and a tiny RoBERTa quantized directly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "fixtures/make_model.hpp"
#include "model/roberta.hpp"
#include "ops/gemm.hpp"
#include "quant/dense.hpp"
#include "quant/int8.hpp"
#include "quant/quant_config.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using quant::Int8Activations;
using quant::Int8Linear;
using quant::Int8Settings;
using quant::Int8Weights;

// ---- integer GEMM wrappers -------------------------------------------------------------------------

template <typename A>
std::vector<A> random_bytes(std::size_t n, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<A> v(n);
  for (auto& x : v) x = static_cast<A>(d(rng));
  return v;
}

// C = (A - a_zero) op(B), exact in 64 bits.
template <typename A>
std::vector<std::int64_t> reference_gemm(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const A* a,
                                         std::int64_t lda, int a_zero, const std::int8_t* b, std::int64_t ldb) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(m * n), 0);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const std::int64_t bv = trans_b == 'N' ? b[p * ldb + j] : b[j * ldb + p];
        acc += (static_cast<std::int64_t>(a[i * lda + p]) - a_zero) * bv;
      }
      c[i * n + j] = acc;
    }
  }
  return c;
}

struct GemmShape {
  std::int64_t m, n, k;
};
const GemmShape kShapes[] = {{1, 1, 1}, {1, 7, 37}, {5, 33, 64}, {17, 48, 100}, {70, 96, 768}, {9, 16, 3072}};

TEST(Int8Gemm, SignedProductsAreExactForBothLayoutsOfB) {
  std::mt19937 rng(1);
  for (const auto& s : kShapes) {
    for (char trans : {'N', 'T'}) {
      // Leading dimensions wider than the rows, so strides are exercised.
      const std::int64_t lda = s.k + 3, ldb = (trans == 'N' ? s.n : s.k) + 5, ldc = s.n + 2;
      const auto a = random_bytes<std::int8_t>(static_cast<std::size_t>(s.m * lda), -128, 127, rng);
      const auto b = random_bytes<std::int8_t>(static_cast<std::size_t>((trans == 'N' ? s.k : s.n) * ldb), -128, 127, rng);
      std::vector<std::int32_t> c(static_cast<std::size_t>(s.m * ldc), -7);
      ops::gemm_s8s8s32(trans, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), ldc);
      const auto ref = reference_gemm(trans, s.m, s.n, s.k, a.data(), lda, 0, b.data(), ldb);
      for (std::int64_t i = 0; i < s.m; ++i) {
        for (std::int64_t j = 0; j < s.n; ++j) {
          ASSERT_EQ(c[i * ldc + j], ref[i * s.n + j]) << "s8s8 " << trans << " m " << s.m << " n " << s.n << " k " << s.k;
        }
        for (std::int64_t j = s.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], -7) << "wrote past n";
      }
    }
  }
}

TEST(Int8Gemm, UnsignedProductsWithZeroPointAreExact) {
  std::mt19937 rng(2);
  for (const auto& s : kShapes) {
    for (char trans : {'N', 'T'}) {
      for (int zero : {0, 1, 128, 255}) {
        const std::int64_t lda = s.k + 1, ldb = trans == 'N' ? s.n : s.k, ldc = s.n;
        const auto a = random_bytes<std::uint8_t>(static_cast<std::size_t>(s.m * lda), 0, 255, rng);
        const auto b = random_bytes<std::int8_t>(static_cast<std::size_t>(s.k * s.n), -127, 127, rng);
        std::vector<std::int32_t> c(static_cast<std::size_t>(s.m * ldc));
        ops::gemm_u8s8s32(trans, s.m, s.n, s.k, a.data(), lda, static_cast<std::uint8_t>(zero), b.data(), ldb, c.data(), ldc);
        const auto ref = reference_gemm(trans, s.m, s.n, s.k, a.data(), lda, zero, b.data(), ldb);
        for (std::int64_t i = 0; i < s.m * s.n; ++i) {
          ASSERT_EQ(c[i], ref[i]) << "u8s8 " << trans << " zero " << zero << " m " << s.m << " n " << s.n << " k " << s.k;
        }
      }
    }
  }
  EXPECT_FALSE(ops::igemm_implementation().empty());
}

TEST(Int8Gemm, PackedWeightsGiveExactProductsForAnyRowCountAndConcurrently) {
  std::mt19937 rng(3);
  const std::int64_t n = 96, k = 200;
  const auto b = random_bytes<std::int8_t>(static_cast<std::size_t>(n * k), -127, 127, rng);
  for (bool u : {false, true}) {
    const ops::PackedS8Weights packed(n, k, b.data(), u);
    for (std::int64_t m : {1L, 5L, 64L, 256L, 300L}) {
      const std::int64_t lda = k + 4, ldc = n + 1;
      const int zero = u ? 77 : 0;
      std::vector<std::int64_t> ref;
      std::vector<std::int32_t> c(static_cast<std::size_t>(m * ldc));
      if (u) {
        const auto a = random_bytes<std::uint8_t>(static_cast<std::size_t>(m * lda), 0, 255, rng);
        packed.multiply(m, a.data(), lda, zero, c.data(), ldc);
        ref = reference_gemm('T', m, n, k, a.data(), lda, zero, b.data(), k);
      } else {
        const auto a = random_bytes<std::int8_t>(static_cast<std::size_t>(m * lda), -127, 127, rng);
        packed.multiply(m, a.data(), lda, 0, c.data(), ldc);
        ref = reference_gemm('T', m, n, k, a.data(), lda, 0, b.data(), k);
      }
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(c[i * ldc + j], ref[i * n + j]) << "unsigned " << u << " m " << m;
      }
    }
    // Two threads multiplying different rows with the same weights at once (Int8Linear's row blocks).
    const std::int64_t m = 512;
    const auto a = random_bytes<std::int8_t>(static_cast<std::size_t>(m * k), 0, 100, rng);  // valid as u8 and s8
    std::vector<std::int32_t> c(static_cast<std::size_t>(m * n));
    std::vector<std::thread> workers;
    for (int t = 0; t < 2; ++t) {
      workers.emplace_back([&, t] {
        for (int rep = 0; rep < 20; ++rep) {
          packed.multiply(m / 2, a.data() + t * (m / 2) * k, k, u ? 3 : 0, c.data() + t * (m / 2) * n, n);
        }
      });
    }
    for (auto& w : workers) w.join();
    const auto ref = reference_gemm('T', m, n, k, a.data(), k, u ? 3 : 0, b.data(), k);
    for (std::int64_t i = 0; i < m * n; ++i) ASSERT_EQ(c[i], ref[i]) << "concurrent, unsigned " << u;
  }
}

// ---- Int8Linear ------------------------------------------------------------------------------------

struct Data {
  std::int64_t M, K, N;
  std::vector<float> x, w, b;  // x [M, K] (row stride K), w [N, K], b [N]
};

// Rows with different magnitudes and a few outlier channels (what SmoothQuant is for).
Data make_data(std::int64_t M, std::int64_t K, std::int64_t N, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Data d{M, K, N, {}, {}, {}};
  for (std::int64_t m = 0; m < M; ++m) {
    const float row_scale = 0.2f + static_cast<float>(m % 5);
    for (std::int64_t k = 0; k < K; ++k) d.x.push_back(nd(rng) * row_scale * (k % 13 == 3 ? 20.0f : 1.0f));
  }
  for (std::int64_t i = 0; i < N * K; ++i) d.w.push_back(nd(rng) * 0.05f);
  for (std::int64_t n = 0; n < N; ++n) d.b.push_back(nd(rng) * 0.1f);
  return d;
}

std::unique_ptr<quant::DenseLinear> dense(const Data& d) {
  auto w = torch::from_blob(const_cast<float*>(d.w.data()), {d.N, d.K}, torch::kFloat32).clone();
  auto b = torch::from_blob(const_cast<float*>(d.b.data()), {d.N}, torch::kFloat32).clone();
  return std::make_unique<quant::DenseLinear>(w, b, true);
}

quant::ChannelStats stats_of(const Data& d) {
  quant::ChannelStats s;
  s.min.assign(static_cast<std::size_t>(d.K), INFINITY);
  s.max.assign(static_cast<std::size_t>(d.K), -INFINITY);
  for (std::int64_t m = 0; m < d.M; ++m) {
    for (std::int64_t k = 0; k < d.K; ++k) {
      s.min[k] = std::min(s.min[k], d.x[m * d.K + k]);
      s.max[k] = std::max(s.max[k], d.x[m * d.K + k]);
    }
  }
  s.rows = d.M;
  return s;
}

Int8Settings settings_for(Int8Weights w, Int8Activations a, bool smooth) {
  Int8Settings s;
  s.weights = w;
  s.activations = a;
  s.smoothquant = smooth;
  s.smoothquant_alpha = 0.5;
  return s;
}

// One site of `parts` parts over the data's float layer, quantized.
std::vector<quant::LinearPtr> quantize(const Data& d, const Int8Settings& s, const std::vector<std::int64_t>& parts) {
  auto layer = dense(d);
  quant::LinearSite site;
  for (std::size_t i = 0; i < parts.size(); ++i) site.prefixes.push_back(std::string(1, static_cast<char>('a' + i)));
  site.part_out = parts;
  site.layer = layer.get();
  const auto stats = stats_of(d);
  return quant::quantize_site_int8(site, s, &stats, s.smoothquant);
}

const Int8Linear& as_int8(const quant::LinearPtr& p) { return dynamic_cast<const Int8Linear&>(*p); }

// What the layer must compute, emulated in double from its stored codes and scales with the test's
// own activation quantization (round half to even, as nearbyint).
std::vector<double> emulate(const Int8Linear& L, const float* x, std::int64_t M, std::int64_t ldx) {
  const std::int64_t K = L.in_features(), N = L.out_features();
  const auto& act = L.activation();
  std::vector<double> y(static_cast<std::size_t>(M * N));
  std::vector<double> q(static_cast<std::size_t>(K));
  for (std::int64_t m = 0; m < M; ++m) {
    std::vector<float> xs(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) {
      xs[k] = act.smooth_scale.empty() ? x[m * ldx + k] : x[m * ldx + k] * (1.0f / act.smooth_scale[k]);
    }
    float scale = act.input_scale;
    if (act.mode == Int8Activations::per_token) {
      float amax = 0;
      for (float v : xs) amax = std::max(amax, std::fabs(v));
      scale = amax / 127.0f;
      for (std::int64_t k = 0; k < K; ++k) q[k] = amax > 0 ? std::nearbyint(xs[k] * (127.0f / amax)) : 0.0;
    } else if (act.mode == Int8Activations::per_tensor_symm) {
      for (std::int64_t k = 0; k < K; ++k) q[k] = std::nearbyint(std::clamp(xs[k] * (1.0f / scale), -127.0f, 127.0f));
    } else {
      const float zp = static_cast<float>(act.zero_point);
      for (std::int64_t k = 0; k < K; ++k) q[k] = std::nearbyint(std::clamp(xs[k] * (1.0f / scale), -zp, 255.0f - zp));
    }
    for (std::int64_t n = 0; n < N; ++n) {
      const double ws = L.weight_scale().size() == 1 ? L.weight_scale()[0] : L.weight_scale()[n];
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += q[k] * L.weight()[n * K + k];
      y[m * N + n] = acc * scale * ws + (L.bias_f32().empty() ? 0.0 : L.bias_f32()[n]);
    }
  }
  return y;
}

struct Mode {
  Int8Weights w;
  Int8Activations a;
  bool smooth;
};
std::string name(const Mode& m) {
  return std::string(quant::to_string(m.w)) + "/" + quant::to_string(m.a) + (m.smooth ? "/smooth" : "");
}
std::vector<Mode> all_modes() {
  std::vector<Mode> v;
  for (auto w : {Int8Weights::per_channel, Int8Weights::per_tensor}) {
    for (auto a : {Int8Activations::per_token, Int8Activations::per_tensor_symm, Int8Activations::per_tensor_asymm}) {
      for (bool s : {false, true}) v.push_back({w, a, s});
    }
  }
  return v;
}

TEST(Int8Linear, IntegerPathMatchesAnExactEmulation) {
  const Data d = make_data(23, 96, 40, 3);
  for (const auto& mode : all_modes()) {
    auto parts = quantize(d, settings_for(mode.w, mode.a, mode.smooth), {40});
    ASSERT_EQ(parts.size(), 1u);
    std::vector<float> y(static_cast<std::size_t>(d.M * d.N));
    parts[0]->forward(d.x.data(), d.M, d.K, y.data(), d.N, 1.0f, 0.0f);
    const auto ref = emulate(as_int8(parts[0]), d.x.data(), d.M, d.K);
    for (std::size_t i = 0; i < y.size(); ++i) {
      // Float32 dequantization of an exact int32: a few float ulps of the value.
      ASSERT_NEAR(y[i], ref[i], 1e-5 * (std::fabs(ref[i]) + 1e-3)) << name(mode) << " element " << i;
    }
  }
}

// |x w - x^ w^| <= sum_k |x_k - x^_k| |w_k| + |x^_k| |w_k - w^_k| with |x - x^| <= sx / 2 (in range)
// and |w - w^| <= sw / 2: the bound below, per output, from the layer's own scales.
TEST(Int8Linear, StaysWithinTheQuantizationErrorBoundOfTheFloatLayer) {
  const Data d = make_data(31, 128, 48, 4);
  for (const auto& mode : all_modes()) {
    auto parts = quantize(d, settings_for(mode.w, mode.a, mode.smooth), {48});
    const auto& L = as_int8(parts[0]);
    std::vector<float> y(static_cast<std::size_t>(d.M * d.N));
    parts[0]->forward(d.x.data(), d.M, d.K, y.data(), d.N, 1.0f, 0.0f);
    const auto& act = L.activation();
    double worst_ratio = 0;
    for (std::int64_t m = 0; m < d.M; ++m) {
      // x' = x / s, the quantized values; s = 1 without smoothing.
      std::vector<double> xs(static_cast<std::size_t>(d.K));
      double amax = 0;
      for (std::int64_t k = 0; k < d.K; ++k) {
        xs[k] = d.x[m * d.K + k] / (act.smooth_scale.empty() ? 1.0 : act.smooth_scale[k]);
        amax = std::max(amax, std::fabs(xs[k]));
      }
      const double sx = act.mode == Int8Activations::per_token ? amax / 127.0 : act.input_scale;
      for (std::int64_t n = 0; n < d.N; ++n) {
        const double sw = L.weight_scale().size() == 1 ? L.weight_scale()[0] : L.weight_scale()[n];
        double exact = d.b[n], bound = 0, magnitude = 0;
        for (std::int64_t k = 0; k < d.K; ++k) {
          const double s = act.smooth_scale.empty() ? 1.0 : act.smooth_scale[k];
          const double w_smoothed = d.w[n * d.K + k] * s;
          exact += static_cast<double>(d.x[m * d.K + k]) * d.w[n * d.K + k];
          bound += sx / 2 * std::fabs(w_smoothed) + sw / 2 * (std::fabs(xs[k]) + sx / 2);
          magnitude += std::fabs(d.x[m * d.K + k] * d.w[n * d.K + k]);
        }
        bound += 1e-5 * (magnitude + std::fabs(exact));  // float rounding
        const double err = std::fabs(y[m * d.N + n] - exact);
        ASSERT_LE(err, bound) << name(mode) << " row " << m << " col " << n;
        worst_ratio = std::max(worst_ratio, err / bound);
      }
    }
    // The bound is not vacuous: the layer does lose precision.
    EXPECT_GT(worst_ratio, 0.01) << name(mode);
  }
}

TEST(Int8Linear, RowsAreIndependentOfBatchStridesAndAccumulation) {
  const Data d = make_data(70, 64, 24, 5);  // M > 64: the padded-M path
  for (const auto& mode : all_modes()) {
    auto parts = quantize(d, settings_for(mode.w, mode.a, mode.smooth), {24});
    auto& L = *parts[0];
    std::vector<float> all(static_cast<std::size_t>(d.M * d.N));
    L.forward(d.x.data(), d.M, d.K, all.data(), d.N, 1.0f, 0.0f);
    for (std::int64_t m : {0L, 13L, 69L}) {
      // One row alone, written into a wider buffer that holds other values (ldy > N, beta = 1).
      const std::int64_t ldy = d.N + 5;
      std::vector<float> y(static_cast<std::size_t>(ldy), 2.5f);
      L.forward(d.x.data() + m * d.K, 1, d.K, y.data(), ldy, 1.0f, 1.0f);
      for (std::int64_t n = 0; n < d.N; ++n) ASSERT_EQ(y[n], 2.5f + all[m * d.N + n]) << name(mode);
      for (std::int64_t n = d.N; n < ldy; ++n) ASSERT_EQ(y[n], 2.5f) << "wrote past out";
    }
    // A strided input (ldx > K) and alpha scale the result.
    const std::int64_t ldx = d.K + 7;
    std::vector<float> xw(static_cast<std::size_t>(d.M * ldx), 1e6f);
    for (std::int64_t m = 0; m < d.M; ++m) std::copy_n(d.x.data() + m * d.K, d.K, xw.data() + m * ldx);
    std::vector<float> y2(all.size());
    L.forward(xw.data(), d.M, ldx, y2.data(), d.N, 2.0f, 0.0f);
    for (std::size_t i = 0; i < y2.size(); ++i) ASSERT_EQ(y2[i], 2.0f * all[i]) << name(mode);
  }
}

TEST(Int8Linear, StaticScalesClampOutOfRangeActivations) {
  const Data d = make_data(8, 32, 8, 6);
  auto parts = quantize(d, settings_for(Int8Weights::per_channel, Int8Activations::per_tensor_symm, false), {8});
  const auto& L = as_int8(parts[0]);
  // 10x the calibrated range: every code saturates at +-127, as the emulation clamps.
  std::vector<float> big(d.x);
  for (auto& v : big) v *= 10.0f;
  std::vector<float> y(static_cast<std::size_t>(d.M * d.N));
  parts[0]->forward(big.data(), d.M, d.K, y.data(), d.N, 1.0f, 0.0f);
  const auto ref = emulate(L, big.data(), d.M, d.K);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 * (std::fabs(ref[i]) + 1e-3));
}

TEST(Int8Linear, ConcatenatedPartsEqualThePartsOneByOne) {
  const Data d = make_data(19, 64, 3 * 16, 7);
  for (const auto& mode : all_modes()) {
    auto parts = quantize(d, settings_for(mode.w, mode.a, mode.smooth), {16, 16, 16});
    ASSERT_EQ(parts.size(), 3u);
    // Separately quantized parts: per-tensor weight scales differ between parts, the activation side
    // (input scale, zero point, smooth scale over all parts) is shared.
    for (const auto& p : parts) {
      EXPECT_EQ(as_int8(p).activation(), as_int8(parts[0]).activation()) << name(mode);
      EXPECT_EQ(as_int8(p).weight_scale().size(), mode.w == Int8Weights::per_tensor ? 1u : 16u);
    }
    std::vector<float> separate(static_cast<std::size_t>(d.M * d.N));
    for (std::size_t i = 0; i < 3; ++i) parts[i]->forward(d.x.data(), d.M, d.K, separate.data() + 16 * i, d.N, 1.0f, 0.0f);
    auto fused = quant::concat_outputs(std::move(parts));
    ASSERT_NE(dynamic_cast<Int8Linear*>(fused.get()), nullptr) << "int8 parts fuse into one Int8Linear";
    std::vector<float> together(separate.size());
    fused->forward(d.x.data(), d.M, d.K, together.data(), d.N, 1.0f, 0.0f);
    EXPECT_EQ(separate, together) << name(mode);
    std::vector<TensorToWrite> t;
    EXPECT_THROW(fused->export_tensors("x", t), std::logic_error);
  }
}

// ---- SmoothQuant ---------------------------------------------------------------------------------------

TEST(SmoothQuant, ScalesFollowTheFormulaOverAllPartsOfASite) {
  quant::ChannelStats st;
  st.min = {-4.0f, 0.5f, 0.0f, -9.0f};
  st.max = {1.0f, 1.0f, 0.0f, 2.0f};
  st.rows = 3;
  // W [2, 4]: column maxima over both rows: 1, 4, 2, 0.25
  const std::vector<float> w = {1.0f, -0.5f, 2.0f, 0.25f, -0.5f, 4.0f, 1.0f, 0.0f};
  auto s = quant::smoothquant_scales(st, w, 4, 2, 0.5);
  EXPECT_FLOAT_EQ(s[0], 2.0f);          // sqrt(4) / sqrt(1)
  EXPECT_FLOAT_EQ(s[1], 0.5f);          // sqrt(1) / sqrt(4)
  EXPECT_FLOAT_EQ(s[2], 1.0f);          // no activation: left alone
  EXPECT_FLOAT_EQ(s[3], 6.0f);          // sqrt(9) / sqrt(0.25)
  auto s1 = quant::smoothquant_scales(st, w, 4, 2, 1.0);
  EXPECT_FLOAT_EQ(s1[3], 9.0f);         // alpha 1: all of it to the weights
  auto s0 = quant::smoothquant_scales(st, w, 4, 2, 0.0);
  EXPECT_FLOAT_EQ(s0[1], 0.25f);        // alpha 0: 1 / max|W|

  // The smoothed float layer (x / s)(W s)^T is the same function.
  const Data d = make_data(9, 32, 12, 8);
  const auto sd = quant::smoothquant_scales(stats_of(d), d.w, d.K, d.N, 0.5);
  for (std::int64_t m = 0; m < d.M; ++m) {
    for (std::int64_t n = 0; n < d.N; ++n) {
      double plain = 0, smoothed = 0, mag = 0;
      for (std::int64_t k = 0; k < d.K; ++k) {
        plain += d.x[m * d.K + k] * d.w[n * d.K + k];
        smoothed += (d.x[m * d.K + k] / sd[k]) * (d.w[n * d.K + k] * sd[k]);
        mag += std::fabs(d.x[m * d.K + k] * d.w[n * d.K + k]);
      }
      ASSERT_NEAR(plain, smoothed, 1e-6 * mag);
    }
  }
  // Smoothing equalises the channels: the outlier channels' activation range shrinks.
  double before = 0, after = 0;
  const auto stats = stats_of(d);
  for (std::int64_t k = 0; k < d.K; ++k) {
    before = std::max(before, static_cast<double>(std::max(-stats.min[k], stats.max[k])));
    after = std::max(after, std::max(-stats.min[k], stats.max[k]) / static_cast<double>(sd[k]));
  }
  EXPECT_LT(after, before / 4);

  // A fused site's parts share one smooth scale, computed over all their rows.
  auto parts = quantize(d, settings_for(Int8Weights::per_channel, Int8Activations::per_token, true), {4, 8});
  for (const auto& p : parts) EXPECT_EQ(as_int8(p).activation().smooth_scale, sd);
}

TEST(SmoothQuant, HelpsStaticScalesWithOutlierChannels) {
  // Per-tensor static activations suffer most from outlier channels; smoothing must reduce the error.
  const Data d = make_data(40, 256, 32, 9);
  auto err = [&](bool smooth) {
    auto parts = quantize(d, settings_for(Int8Weights::per_channel, Int8Activations::per_tensor_symm, smooth), {32});
    std::vector<float> y(static_cast<std::size_t>(d.M * d.N));
    parts[0]->forward(d.x.data(), d.M, d.K, y.data(), d.N, 1.0f, 0.0f);
    double e = 0;
    for (std::int64_t m = 0; m < d.M; ++m) {
      for (std::int64_t n = 0; n < d.N; ++n) {
        double exact = d.b[n];
        for (std::int64_t k = 0; k < d.K; ++k) exact += static_cast<double>(d.x[m * d.K + k]) * d.w[n * d.K + k];
        e += (y[m * d.N + n] - exact) * (y[m * d.N + n] - exact);
      }
    }
    return std::sqrt(e);
  };
  EXPECT_LT(err(true), 0.7 * err(false));
}

// ---- checkpoint format ---------------------------------------------------------------------------------

class Int8Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-int8-test"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::vector<TensorToWrite>& tensors, const std::string& name = "ckpt") {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    write_safetensors((d / "model.safetensors").string(), tensors);
    return d.string();
  }
  fs::path dir_;
};

// resident_bytes counts the packed copy and the row sums that the first forward makes, so the bytes a
// result file reports before a run do not change with it (a real layer's shape: oneDNN pads little).
// The copy exists only for oneDNN's integer kernels (VNNI); on an AVX2-only CPU there is none.
TEST(Int8Linear, ResidentBytesCountThePackedCopyBeforeTheFirstForward) {
  const Data d = make_data(2, 768, 1024, 12);
  auto layer = std::move(quantize(d, settings_for(Int8Weights::per_channel, Int8Activations::per_token, false), {1024})[0]);
  const double before = static_cast<double>(layer->resident_bytes());
  EXPECT_GT(before, (ops::have_onednn_igemm() ? 2.0 : 1.0) * 768 * 1024);
  std::vector<float> y(static_cast<std::size_t>(d.M * d.N));
  layer->forward(d.x.data(), d.M, d.K, y.data(), d.N, 1.0f, 0.0f);
  const double after = static_cast<double>(layer->resident_bytes());
  EXPECT_NEAR(before / after, 1.0, 0.02) << "before " << before << ", after " << after;
}

TEST_F(Int8Checkpoint, ExportedLayersLoadBackIdentically) {
  const Data d = make_data(11, 48, 20, 10);
  for (const auto& mode : all_modes()) {
    Int8Settings s = settings_for(mode.w, mode.a, mode.smooth);
    auto parts = quantize(d, s, {20});
    if (mode.smooth) s.smoothquant_layers = {"layer"};
    std::vector<TensorToWrite> tensors;
    parts[0]->export_tensors("layer", tensors);
    const std::string path = write(tensors, "rt");
    Checkpoint ckpt(path);
    std::set<std::string> used;
    auto loaded = quant::load_int8_linear(ckpt, "layer", d.K, d.N, s, used);
    EXPECT_EQ(used.size(), ckpt.names().size()) << "every tensor read: " << name(mode);
    // Two bytes per weight (the weights and the copy packed for the product) and the scales, counted
    // the same before the first forward makes the copy.
    EXPECT_LT(loaded->resident_bytes(), static_cast<std::size_t>(d.N * d.K * 4));
    std::vector<float> a(static_cast<std::size_t>(d.M * d.N)), b(a.size());
    parts[0]->forward(d.x.data(), d.M, d.K, a.data(), d.N, 1.0f, 0.0f);
    loaded->forward(d.x.data(), d.M, d.K, b.data(), d.N, 1.0f, 0.0f);
    EXPECT_EQ(a, b) << name(mode);
    EXPECT_EQ(parts[0]->describe(), loaded->describe());
    EXPECT_EQ(parts[0]->weight_f32(), loaded->weight_f32());
    fs::remove_all(path);
  }
}

TEST_F(Int8Checkpoint, SettingsRoundTripThroughJson) {
  Int8Settings s = settings_for(Int8Weights::per_tensor, Int8Activations::per_tensor_asymm, true);
  s.smoothquant_alpha = 0.75;
  s.smoothquant_layers = {"a.q", "a.k"};
  s.calibration_dataset = "data/x.json";
  s.calibration_samples = 128;
  const auto back = quant::parse_int8_settings(s.to_json(), "cfg");
  EXPECT_EQ(back.weights, s.weights);
  EXPECT_EQ(back.activations, s.activations);
  EXPECT_TRUE(back.smoothquant);
  EXPECT_EQ(back.smoothquant_alpha, 0.75);
  EXPECT_EQ(back.smoothquant_layers, s.smoothquant_layers);
  EXPECT_EQ(back.calibration_dataset, "data/x.json");
  EXPECT_EQ(back.calibration_samples, 128);
  EXPECT_EQ(back.describe(), s.describe());
  EXPECT_EQ(s.to_json()["quant_method"], "int8");
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError (expected one mentioning '" << needle << "')";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(Int8Checkpoint, BadSettingsAreInputErrorsNamingTheKey) {
  const nlohmann::json good = settings_for(Int8Weights::per_channel, Int8Activations::per_token, false).to_json();
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return j;
  };
  auto parse = [](const nlohmann::json& j) { return [j] { quant::parse_int8_settings(j, "c/config.json: quantization_config"); }; };
  expect_input_error(parse(with([](auto& j) { j.erase("weights"); })), "quantization_config.weights");
  expect_input_error(parse(with([](auto& j) { j["activations"] = "per_row"; })), "per_row");
  expect_input_error(parse(with([](auto& j) { j["activation"] = "per_token"; })), "quantization_config.activation");
  expect_input_error(parse(with([](auto& j) { j["smoothquant"] = "yes"; })), "quantization_config.smoothquant");
  expect_input_error(parse(with([](auto& j) { j["smoothquant"] = true; j["smoothquant_alpha"] = 0.5; })),
                     "smoothquant_layers");
  expect_input_error(parse(with([](auto& j) {
                       j["smoothquant"] = true;
                       j["smoothquant_alpha"] = 2;
                       j["smoothquant_layers"] = nlohmann::json::array();
                     })),
                     "smoothquant_alpha");
  expect_input_error(parse(with([](auto& j) { j["calibration_samples"] = -1; })), "calibration_samples");
  // Dispatch from config.json reaches the int8 parser.
  const fs::path d = dir_ / "cfg";
  fs::create_directories(d);
  std::ofstream(d / "config.json") << nlohmann::json{{"quantization_config", with([](auto& j) { j["weights"] = "per_row"; })}}.dump();
  expect_input_error([&] { quant::read_quant_config(d.string()); }, "quantization_config.weights");
}

TEST_F(Int8Checkpoint, BadTensorsAreInputErrorsNamingTheTensor) {
  const Data d = make_data(4, 16, 8, 11);
  Int8Settings s = settings_for(Int8Weights::per_channel, Int8Activations::per_tensor_asymm, true);
  auto parts = quantize(d, s, {8});
  s.smoothquant_layers = {"L"};
  std::vector<TensorToWrite> good;
  parts[0]->export_tensors("L", good);
  int case_no = 0;
  auto try_load = [&](const std::function<void(std::vector<TensorToWrite>&)>& edit, const Int8Settings& settings,
                      const std::string& needle) {
    std::vector<TensorToWrite> t = good;
    edit(t);
    const std::string path = write(t, "bad" + std::to_string(case_no++));
    expect_input_error(
        [&] {
          Checkpoint ckpt(path);
          std::set<std::string> used;
          quant::load_int8_linear(ckpt, "L", d.K, d.N, settings, used);
        },
        needle);
  };
  auto find = [](std::vector<TensorToWrite>& t, const std::string& n) -> TensorToWrite& {
    return *std::find_if(t.begin(), t.end(), [&](const TensorToWrite& x) { return x.name == n; });
  };
  auto erase = [](std::vector<TensorToWrite>& t, const std::string& n) {
    t.erase(std::remove_if(t.begin(), t.end(), [&](const TensorToWrite& x) { return x.name == n; }), t.end());
  };
  {
    // The unedited tensors load.
    const std::string path = write(good, "good");
    Checkpoint ckpt(path);
    std::set<std::string> used;
    EXPECT_NO_THROW(quant::load_int8_linear(ckpt, "L", d.K, d.N, s, used));
  }
  try_load([&](auto& t) { find(t, "L.weight").dtype = TensorDType::U8; }, s, "'L.weight'");
  try_load([&](auto& t) { erase(t, "L.weight_scale"); }, s, "'L.weight_scale'");
  try_load([&](auto& t) {
    auto& w = find(t, "L.weight_scale");
    w.shape = {1};
    w.data.resize(4);
  }, s, "shape [1], expected [8]");
  try_load([&](auto& t) {
    auto& w = find(t, "L.weight_scale");
    const float neg = -1.0f;
    std::memcpy(w.data.data(), &neg, 4);
  }, s, "finite and positive");
  try_load([&](auto& t) { erase(t, "L.input_scale"); }, s, "'L.input_scale'");
  try_load([&](auto& t) {
    auto& z = find(t, "L.input_zero_point");
    const std::int32_t v = 300;
    std::memcpy(z.data.data(), &v, 4);
  }, s, "outside 0..255");
  try_load([&](auto& t) { erase(t, "L.smooth_scale"); }, s, "'L.smooth_scale'");
  Int8Settings unlisted = s;
  unlisted.smoothquant_layers = {"other"};
  try_load([](auto&) {}, unlisted, "not listed");
  Int8Settings per_token = s;
  per_token.activations = Int8Activations::per_token;
  try_load([&](auto& t) { erase(t, "L.input_zero_point"); }, per_token, "'L.input_scale'");
}

// ---- a tiny RoBERTa, quantized directly ----------------------------------------------------------------

constexpr std::int64_t kVocab = 150;

class TinyRobertaInt8 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(testing::make_temp_dir("evalrun-int8-roberta"));
    const fs::path dir = *root_ / "qa";
    make_roberta_checkpoint(dir.string(), "tiny", EncoderHead::question_answering, 3, kVocab);
    // HF's init (std 0.02) leaves the tiny model's layers nearly idle next to the residual stream, so
    // their quantization would barely show in the logits: the projections and the head are scaled up
    // (std 0.3: pre-activations of order 1, like a trained model's) to make the logits depend on them.
    std::vector<TensorToWrite> tensors;
    {
      SafetensorsFile file((dir / "model.safetensors").string());
      for (const auto& [n, v] : file.tensors()) {
        TensorToWrite t{n, v.dtype, v.shape, std::vector<std::byte>(v.data, v.data + v.nbytes)};
        const bool projection = n.find("encoder.layer.") != std::string::npos && n.find("LayerNorm") == std::string::npos &&
                                n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
        if (projection || n == "qa_outputs.weight") {
          auto* f = reinterpret_cast<float*>(t.data.data());
          for (std::size_t i = 0; i < t.data.size() / 4; ++i) f[i] *= 15.0f;
        }
        tensors.push_back(std::move(t));
      }
    }
    write_safetensors((dir / "model.safetensors").string(), tensors);
    set_compute_threads(2);
  }
  static void TearDownTestSuite() {
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (root_ == nullptr) return;
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string qa_dir() { return (*root_ / "qa").string(); }

  static std::vector<std::int64_t> sequence(std::int64_t len, std::int64_t salt) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(len));
    ids[0] = 0;
    for (std::int64_t t = 1; t + 1 < len; ++t) ids[t] = 4 + (t * 31 + salt * 17) % (kVocab - 4);
    ids[len - 1] = 2;
    return ids;
  }

  // The model with every layer replaced by its INT8 quantization, calibrated on `calib` sequences
  // (as the direct-quantization path of a run does).
  static std::unique_ptr<RobertaModel> quantized(const Int8Settings& base, int calib,
                                                 std::vector<quant::QuantizedSite>* keep = nullptr,
                                                 Int8Settings* out_settings = nullptr) {
    auto model = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
    Int8Settings s = base;
    auto replace = [&](std::size_t i, quant::LinearPtr l) { return model->replace_linear(i, std::move(l)); };
    auto calibrate = [&] {
      std::vector<float> st, en;
      for (int c = 0; c < calib; ++c) {
        const auto ids = sequence(10 + 3 * c, 100 + c);
        const std::vector<std::int64_t> mask(ids.size(), 1);
        model->question_answering(ids.data(), mask.data(), 1, static_cast<std::int64_t>(ids.size()), st, en);
      }
    };
    auto sites = quant::quantize_sites_int8(model->linear_sites(), replace, calibrate, s);
    for (std::size_t i = 0; i < sites.size(); ++i) {
      if (keep != nullptr) {
        // Export copies for the caller before installing.
        quant::QuantizedSite copy;
        copy.prefixes = sites[i].prefixes;
        for (const auto& p : sites[i].parts) {
          const auto& q = as_int8(p);
          copy.parts.push_back(std::make_unique<Int8Linear>(q.in_features(), q.out_features(), q.weight(), q.weight_scale(),
                                                            q.activation(), q.bias_f32()));
        }
        keep->push_back(std::move(copy));
      }
      model->replace_linear(i, quant::concat_outputs(std::move(sites[i].parts)));
    }
    if (out_settings != nullptr) *out_settings = s;
    return model;
  }

  struct Batch {
    std::vector<std::int64_t> ids, mask;
    std::int64_t batch = 0, seq = 0;
  };
  static Batch padded(const std::vector<std::vector<std::int64_t>>& seqs, std::int64_t seq) {
    Batch b;
    b.batch = static_cast<std::int64_t>(seqs.size());
    b.seq = seq;
    for (const auto& s : seqs) {
      for (std::int64_t t = 0; t < seq; ++t) {
        const bool real = t < static_cast<std::int64_t>(s.size());
        b.ids.push_back(real ? s[t] : 1);
        b.mask.push_back(real ? 1 : 0);
      }
    }
    return b;
  }

  static fs::path* root_;
};
fs::path* TinyRobertaInt8::root_ = nullptr;

TEST_F(TinyRobertaInt8, QaLogitsStayCloseToFp32InEveryMode) {
  auto ref_model = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  const std::vector<std::vector<std::int64_t>> seqs = {sequence(40, 1), sequence(25, 2), sequence(33, 3)};
  const Batch b = padded(seqs, 40);
  std::vector<float> rs, re;
  ref_model->question_answering(b.ids.data(), b.mask.data(), b.batch, b.seq, rs, re);
  // Relative L2 error of the real tokens' logits.
  auto relative_error = [&](const std::vector<float>& s, const std::vector<float>& e) {
    double err = 0, norm = 0;
    for (std::size_t r = 0; r < seqs.size(); ++r) {
      for (std::size_t t = 0; t < seqs[r].size(); ++t) {
        const std::size_t i = r * 40 + t;
        err += (s[i] - rs[i]) * (s[i] - rs[i]) + (e[i] - re[i]) * (e[i] - re[i]);
        norm += rs[i] * rs[i] + re[i] * re[i];
      }
    }
    return std::sqrt(err / norm);
  };
  // Each 8-bit product loses about 1/254 of its operands' range per operand (the per-layer bound of
  // the Int8Linear tests), more for static per-tensor ranges that the calibration set (4 sequences)
  // does not fully cover; 8 products in a row (2 layers x 4) keep the logits within a few percent.
  constexpr double kBound = 0.10;
  for (const auto& mode : all_modes()) {
    auto model = quantized(settings_for(mode.w, mode.a, mode.smooth), 4);
    EXPECT_NE(model->linear_sites()[0].layer->describe().find("int8"), std::string::npos);
    std::vector<float> s, e;
    model->question_answering(b.ids.data(), b.mask.data(), b.batch, b.seq, s, e);
    const double rel = relative_error(s, e);
    EXPECT_LT(rel, kBound) << name(mode);
    EXPECT_GT(rel, 1e-4) << name(mode) << ": no quantization error at all (layers not replaced?)";
  }
  // The bound catches a real mistake: weight scales 20% off in every layer.
  auto model = quantized(settings_for(Int8Weights::per_channel, Int8Activations::per_token, false), 4);
  const auto sites = model->linear_sites();
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& q = dynamic_cast<const Int8Linear&>(*sites[i].layer);
    auto scale = q.weight_scale();
    for (auto& v : scale) v *= 1.2f;
    model->replace_linear(i, std::make_unique<Int8Linear>(q.in_features(), q.out_features(), q.weight(), scale,
                                                          q.activation(), q.bias_f32()));
  }
  std::vector<float> s, e;
  model->question_answering(b.ids.data(), b.mask.data(), b.batch, b.seq, s, e);
  EXPECT_GT(relative_error(s, e), kBound);
}

TEST_F(TinyRobertaInt8, LogitsDoNotDependOnBatchOrPadding) {
  for (const auto& mode : {Mode{Int8Weights::per_channel, Int8Activations::per_token, true},
                           Mode{Int8Weights::per_tensor, Int8Activations::per_tensor_asymm, false}}) {
    auto model = quantized(settings_for(mode.w, mode.a, mode.smooth), 3);
    const std::vector<std::vector<std::int64_t>> seqs = {sequence(30, 4), sequence(12, 5), sequence(21, 6)};
    const Batch all = padded(seqs, 48);  // extra padding past the longest
    std::vector<float> s, e;
    model->question_answering(all.ids.data(), all.mask.data(), all.batch, all.seq, s, e);
    for (std::size_t r = 0; r < seqs.size(); ++r) {
      const Batch one = padded({seqs[r]}, static_cast<std::int64_t>(seqs[r].size()));
      std::vector<float> s1, e1;
      model->question_answering(one.ids.data(), one.mask.data(), 1, one.seq, s1, e1);
      for (std::size_t t = 0; t < seqs[r].size(); ++t) {
        ASSERT_NEAR(s[r * 48 + t], s1[t], 1e-5) << name(mode) << " row " << r << " token " << t;
        ASSERT_NEAR(e[r * 48 + t], e1[t], 1e-5) << name(mode);
      }
    }
  }
}

TEST_F(TinyRobertaInt8, WrittenCheckpointLoadsAsTheSameModel) {
  Int8Settings s;
  std::vector<quant::QuantizedSite> sites;
  auto direct = quantized(settings_for(Int8Weights::per_channel, Int8Activations::per_tensor_symm, true), 3, &sites, &s);
  EXPECT_EQ(s.smoothquant_layers.size(), 12u);  // 2 layers x (query, key, value, attention out, intermediate, output)
  // The float checkpoint's other tensors plus the exported layers, as `evalrun quantize` writes them.
  const fs::path out = *root_ / "int8";
  fs::create_directories(out);
  std::set<std::string> replaced;
  std::vector<TensorToWrite> tensors;
  for (auto& site : sites) {
    for (std::size_t i = 0; i < site.parts.size(); ++i) {
      site.parts[i]->export_tensors(site.prefixes[i], tensors);
      replaced.insert(site.prefixes[i] + ".weight");
      replaced.insert(site.prefixes[i] + ".bias");
    }
  }
  Checkpoint src(qa_dir());
  for (const auto& n : src.names()) {
    if (replaced.count(n)) continue;
    const auto& v = src.get(n);
    tensors.push_back({n, v.dtype, v.shape, std::vector<std::byte>(v.data, v.data + v.nbytes)});
  }
  write_safetensors((out / "model.safetensors").string(), tensors);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fs::path(qa_dir()) / "config.json"));
  cfg["quantization_config"] = s.to_json();
  std::ofstream(out / "config.json") << cfg.dump(2);

  auto loaded = RobertaModel::load({out.string(), DType::fp32, "cpu", "int8"});
  EXPECT_NE(loaded->quantization().find("per_tensor_symm"), std::string::npos) << loaded->quantization();
  const Batch b = padded({sequence(20, 7), sequence(14, 8)}, 20);
  std::vector<float> s1, e1, s2, e2;
  direct->question_answering(b.ids.data(), b.mask.data(), b.batch, b.seq, s1, e1);
  loaded->question_answering(b.ids.data(), b.mask.data(), b.batch, b.seq, s2, e2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(e1, e2);
  // A run that asks for another method is refused; a tensor missing is named.
  EXPECT_THROW(RobertaModel::load({out.string(), DType::fp32, "cpu", "gptq"}), InputError);
  expect_input_error([&] { RobertaModel::load({out.string(), DType::bf16, "cpu"}); }, "model.dtype");
}

// BERT's calibration sees the token types the task feeds: the first projection's input (the
// embeddings after their LayerNorm, hidden_states[0]) observed through calibration_pass with a
// question / context pair's type ids has exactly that forward's per-channel min / max, which the
// same ids with all types 0 do not give.
TEST_F(TinyRobertaInt8, BertCalibrationSeesTheTokenTypesItIsGiven) {
  const fs::path dir = *root_ / "bert-qa";
  make_roberta_checkpoint(dir.string(), "tiny-bert", EncoderHead::question_answering, 5, kVocab);
  auto model = RobertaModel::load({dir.string(), DType::fp32, "cpu"});
  ASSERT_TRUE(model->uses_token_types());
  const auto ids = sequence(16, 3);
  std::vector<std::int64_t> types(ids.size(), 0);
  std::fill(types.begin() + 6, types.end(), 1);  // [CLS] q(4) [SEP] | context [SEP]
  const auto n = static_cast<std::int64_t>(ids.size());
  auto observed = [&](const std::int64_t* type_ids) {
    auto replace = [&](std::size_t i, quant::LinearPtr l) { return model->replace_linear(i, std::move(l)); };
    return quant::observe_sites(model->linear_sites(), replace,
                                [&] { model->calibration_pass(ids.data(), type_ids, 1, n); })[0];
  };
  auto channel_range = [&] {  // of the forward pass with the pair's types
    const std::vector<std::int64_t> mask(ids.size(), 1);
    const std::vector<float> h = model->hidden_states(ids.data(), mask.data(), types.data(), 1, n)[0];
    const std::size_t H = h.size() / ids.size();
    quant::ChannelStats want;
    want.min.assign(H, INFINITY);
    want.max.assign(H, -INFINITY);
    for (std::size_t t = 0; t < ids.size(); ++t) {
      for (std::size_t j = 0; j < H; ++j) {
        want.min[j] = std::min(want.min[j], h[t * H + j]);
        want.max[j] = std::max(want.max[j], h[t * H + j]);
      }
    }
    return want;
  };
  const quant::ChannelStats typed = observed(types.data()), want = channel_range();
  EXPECT_EQ(typed.rows, n);
  ASSERT_EQ(typed.max.size(), want.max.size());
  for (std::size_t j = 0; j < want.max.size(); ++j) {
    EXPECT_NEAR(typed.min[j], want.min[j], 1e-6F) << "channel " << j;
    EXPECT_NEAR(typed.max[j], want.max[j], 1e-6F) << "channel " << j;
  }
  const quant::ChannelStats zero = observed(nullptr);
  float moved = 0;
  for (std::size_t j = 0; j < want.max.size(); ++j) moved = std::max(moved, std::fabs(zero.max[j] - typed.max[j]));
  EXPECT_GT(moved, 1e-3F) << "type 1 embeddings changed nothing: the test cannot tell the two apart";
}

}  // namespace
}  // namespace evalrun
