// The bfloat16 decode-step kernel against a double-precision product of the same bfloat16 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ops/bf16_rows.hpp"

namespace {

using evalrun::ops::linear_bf16_rows;

float float_of(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t truncated(float x) {  // any bfloat16 value will do as input
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

TEST(Bf16Rows, MatchesTheExactProductWithinOneRoundingAndRowsAreIndependent) {
  if (!evalrun::ops::have_bf16_rows_kernel()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const std::int64_t k : {1, 31, 32, 33, 63, 64, 65, 97, 768, 770}) {
    const std::int64_t n = 131, m = evalrun::ops::kBf16RowsMax;
    std::vector<std::uint16_t> x(m * k), w(n * k), bias(n);
    for (auto& v : x) v = truncated(dist(gen));
    for (auto& v : w) v = truncated(dist(gen));
    for (auto& v : bias) v = truncated(dist(gen));
    std::vector<std::uint16_t> y(m * n);
    linear_bf16_rows(x.data(), m, k, w.data(), bias.data(), n, y.data());
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        double want = float_of(bias[j]), scale = std::fabs(float_of(bias[j]));
        for (std::int64_t p = 0; p < k; ++p) {
          const double t = static_cast<double>(float_of(x[r * k + p])) * float_of(w[j * k + p]);
          want += t;
          scale += std::fabs(t);
        }
        // One bfloat16 rounding of the result (2^-8 relative) plus float32 accumulation error.
        const double got = float_of(y[r * n + j]);
        EXPECT_NEAR(got, want, std::fabs(want) * 0x1p-8 + scale * 1e-6) << "k " << k << " row " << r << " col " << j;
      }
    }
    // Row 5 alone gives exactly what it gave among 8 rows; no bias is no bias.
    std::vector<std::uint16_t> one(n), nobias(n);
    linear_bf16_rows(x.data() + 5 * k, 1, k, w.data(), bias.data(), n, one.data());
    for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(one[j], y[5 * n + j]) << "k " << k << " col " << j;
    linear_bf16_rows(x.data(), 1, k, w.data(), nullptr, n, nobias.data());
    double want0 = 0;
    for (std::int64_t p = 0; p < k; ++p) want0 += static_cast<double>(float_of(x[p])) * float_of(w[p]);
    EXPECT_NEAR(float_of(nobias[0]), want0, std::fabs(want0) * 0x1p-8 + 1e-5 * k) << "k " << k;
  }
  EXPECT_THROW(linear_bf16_rows(nullptr, 9, 1, nullptr, nullptr, 1, nullptr), std::invalid_argument);
}

}  // namespace
