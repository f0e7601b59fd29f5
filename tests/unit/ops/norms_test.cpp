// The bfloat16 encoders' residual sum + LayerNorm on raw 16-bit rows against a double-precision
// LayerNorm of the rounded sum, and against the float32 rows op it shares its arithmetic with.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/bfloat16.hpp"
#include "ops/norms.hpp"

namespace {

using evalrun::ops::bf16_of;
using evalrun::ops::float_of_bf16;

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& gen, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<std::uint16_t> out(n);
  for (auto& v : out) v = bf16_of(dist(gen));
  return out;
}

struct Case {
  std::int64_t rows = 37, n = 96;  // more rows than one parallel chunk (16)
  std::vector<std::uint16_t> x, residual;
  std::vector<float> w, b;
  explicit Case(unsigned seed) {
    std::mt19937 gen(seed);
    x = random_bf16(rows * n, gen, 3.0f);
    residual = random_bf16(rows * n, gen, 1.0f);
    for (std::uint16_t v : random_bf16(n, gen, 0.5f)) w.push_back(1.0f + float_of_bf16(v));
    for (std::uint16_t v : random_bf16(n, gen, 0.2f)) b.push_back(float_of_bf16(v));
  }
};

TEST(LayerNormRowsBf16, IsTheLayerNormOfTheRoundedResidualSumRoundedOnce) {
  const Case c(1);
  const float eps = 1e-5f;
  std::vector<std::uint16_t> out(c.x.size());
  evalrun::ops::layer_norm_rows_bf16(c.x.data(), c.residual.data(), c.w.data(), c.b.data(), out.data(), c.rows, c.n,
                                     eps);
  std::int64_t exact = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    // The sum as torch stores it (a bfloat16 tensor), then LayerNorm in double.
    std::vector<double> s(c.n);
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < c.n; ++i) {
      s[i] = float_of_bf16(bf16_of(float_of_bf16(c.x[r * c.n + i]) + float_of_bf16(c.residual[r * c.n + i])));
      mean += s[i] / c.n;
    }
    for (std::int64_t i = 0; i < c.n; ++i) var += (s[i] - mean) * (s[i] - mean) / c.n;
    for (std::int64_t i = 0; i < c.n; ++i) {
      const double want = (s[i] - mean) / std::sqrt(var + eps) * c.w[i] + c.b[i];
      const float got = float_of_bf16(out[r * c.n + i]);
      // Within half a bfloat16 unit (2^-8 relative) of the exact value, plus float32 rounding.
      ASSERT_NEAR(got, want, std::abs(want) * (1.0 / 256) + 1e-6) << "row " << r << " column " << i;
      exact += bf16_of(static_cast<float>(want)) == out[r * c.n + i];
    }
  }
  // Rounded once: nearly every value is the nearest bfloat16 of the exact result.
  EXPECT_GE(exact, c.rows * c.n * 99 / 100);
}

TEST(LayerNormRowsBf16, EqualsTheFloat32RowsOpOnTheWidenedSumAndMayRunInPlace) {
  const Case c(2);
  std::vector<float> sum(c.x.size()), want(c.x.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    sum[i] = float_of_bf16(bf16_of(float_of_bf16(c.x[i]) + float_of_bf16(c.residual[i])));
  }
  evalrun::ops::layer_norm_rows(sum.data(), c.w.data(), c.b.data(), want.data(), c.rows, c.n, 1e-5f, true);
  std::vector<std::uint16_t> in_place = c.residual;
  evalrun::ops::layer_norm_rows_bf16(c.x.data(), in_place.data(), c.w.data(), c.b.data(), in_place.data(), c.rows,
                                     c.n, 1e-5f);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(in_place[i], bf16_of(want[i])) << "element " << i;

  // Without a residual: the LayerNorm of x alone.
  std::vector<float> xf(c.x.size());
  for (std::size_t i = 0; i < xf.size(); ++i) xf[i] = float_of_bf16(c.x[i]);
  evalrun::ops::layer_norm_rows(xf.data(), c.w.data(), c.b.data(), want.data(), c.rows, c.n, 1e-5f, true);
  std::vector<std::uint16_t> alone(c.x.size());
  evalrun::ops::layer_norm_rows_bf16(c.x.data(), nullptr, c.w.data(), c.b.data(), alone.data(), c.rows, c.n, 1e-5f);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(alone[i], bf16_of(want[i])) << "element " << i;
}

}  // namespace
