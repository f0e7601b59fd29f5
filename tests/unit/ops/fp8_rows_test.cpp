// The FP8 e4m3 decode-step kernel: every code decodes exactly (against the format's definition written
// out here, not the library's decoder), and products of 1-8 rows (two groups of up to 4) with strides,
// per-channel and per-tensor scales, alpha and accumulation match a double-precision product; a row's
// result does not depend on the rows beside it. Each test runs every kernel version this CPU has
// (AVX-512, AVX2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/fp8_rows.hpp"
#include "ops/isa.hpp"

namespace {

// e4m3: sign, exponent e (bias 7), mantissa m (3 bits); e = 0 is subnormal.
double e4m3_value(std::uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (code & 0x80) != 0 ? -mag : mag;
}

bool is_nan_code(std::uint8_t c) { return (c & 0x7F) == 0x7F; }

TEST(Fp8Rows, DecodesEveryCodeExactly) {
  if (!evalrun::ops::have_fp8_rows_kernel()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  for (const evalrun::ops::Isa isa : evalrun::ops::vector_isas_of_this_cpu()) {
    const evalrun::ops::ScopedIsaCap cap(isa);
    SCOPED_TRACE(evalrun::ops::to_string(isa));
    std::vector<std::uint8_t> codes;
    for (int c = 0; c < 256; ++c) {
      if (!is_nan_code(static_cast<std::uint8_t>(c))) codes.push_back(static_cast<std::uint8_t>(c));
    }
    const std::int64_t n = static_cast<std::int64_t>(codes.size());
    // k = 1 decodes through the masked tail, k = 64 through the full step (the code at position 37).
    for (const std::int64_t k : {1, 64}) {
      const std::int64_t at = k == 1 ? 0 : 37;
      std::vector<std::uint8_t> w(static_cast<std::size_t>(n * k), 0);
      for (std::int64_t j = 0; j < n; ++j) w[j * k + at] = codes[j];
      std::vector<float> x(static_cast<std::size_t>(k), 0.0f), y(static_cast<std::size_t>(n));
      x[at] = 1.0f;
      const float scale = 1.0f;
      evalrun::ops::linear_fp8_rows(x.data(), 1, k, w.data(), &scale, 0, n, k, y.data(), n, 1.0f, 0.0f);
      for (std::int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(static_cast<double>(y[j]), e4m3_value(codes[j])) << "code " << int(codes[j]) << " k " << k;
      }
    }
  }
}

TEST(Fp8Rows, MatchesTheProductAndRowsAreIndependent) {
  if (!evalrun::ops::have_fp8_rows_kernel()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  for (const evalrun::ops::Isa isa : evalrun::ops::vector_isas_of_this_cpu()) {
    const evalrun::ops::ScopedIsaCap cap(isa);
    SCOPED_TRACE(evalrun::ops::to_string(isa));
    std::mt19937 gen(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255);
    for (const std::int64_t k : {1, 7, 8, 9, 15, 16, 24, 31, 32, 33, 47, 63, 64, 65, 97, 127, 128, 129, 768, 770}) {
      const std::int64_t n = 70, m = evalrun::ops::kFp8RowsMax, ldx = k + 3, ldy = n + 5;
      std::vector<std::uint8_t> w(static_cast<std::size_t>(n * k));
      for (auto& c : w) {
        do c = static_cast<std::uint8_t>(byte(gen));
        while (is_nan_code(c));
      }
      std::vector<float> x(static_cast<std::size_t>(m * ldx)), y0(static_cast<std::size_t>(m * ldy)), scale(n);
      for (auto& v : x) v = dist(gen);
      for (auto& v : y0) v = dist(gen);
      for (auto& v : scale) v = std::fabs(dist(gen)) * 0.01f + 1e-3f;
      for (const std::int64_t stride : {0, 1}) {
        for (const float beta : {0.0f, 1.0f}) {
          std::vector<float> all = y0;
          evalrun::ops::linear_fp8_rows(x.data(), m, ldx, w.data(), scale.data(), stride, n, k, all.data(), ldy, 0.5f, beta);
          for (std::int64_t r = 0; r < m; ++r) {
            for (std::int64_t j = 0; j < n; ++j) {
              double want = 0, size = 0;
              for (std::int64_t p = 0; p < k; ++p) {
                const double t = static_cast<double>(x[r * ldx + p]) * e4m3_value(w[j * k + p]);
                want += t;
                size += std::fabs(t);
              }
              const double s = 0.5 * scale[j * stride];
              want = s * want + (beta != 0.0f ? y0[r * ldy + j] : 0.0);
              ASSERT_NEAR(all[r * ldy + j], want, (s * size + std::fabs(y0[r * ldy + j])) * 2e-6)
                  << "k " << k << " stride " << stride << " row " << r << " col " << j;
            }
            for (std::int64_t j = n; j < ldy; ++j) ASSERT_EQ(all[r * ldy + j], y0[r * ldy + j]) << "padding written";
            // The same row alone gives the same bits.
            std::vector<float> one(y0.begin() + r * ldy, y0.begin() + (r + 1) * ldy);
            evalrun::ops::linear_fp8_rows(x.data() + r * ldx, 1, ldx, w.data(), scale.data(), stride, n, k, one.data(), ldy,
                                          0.5f, beta);
            for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], all[r * ldy + j]) << "k " << k << " row " << r << " alone";
          }
        }
      }
    }
    EXPECT_THROW(evalrun::ops::linear_fp8_rows(nullptr, evalrun::ops::kFp8RowsMax + 1, 1, nullptr, nullptr, 0, 1, 1, nullptr, 1, 1.0f, 0.0f),
                 std::invalid_argument);
  }
}

}  // namespace
