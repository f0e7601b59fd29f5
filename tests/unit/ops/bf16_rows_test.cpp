// The bfloat16 decode-step kernel (every version this CPU runs) and the float32-tile GEMM against a
// double-precision product of the same bfloat16 values.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ops/bf16_rows.hpp"
#include "ops/bfloat16.hpp"
#include "ops/isa.hpp"

namespace {

using evalrun::ops::linear_bf16_rows;
constexpr auto float_of = evalrun::ops::float_of_bf16;

std::uint16_t truncated(float x) {  // any bfloat16 value will do as input
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

struct Problem {
  std::int64_t m, n, k;
  std::vector<std::uint16_t> x, w, bias;
};

Problem random_problem(std::int64_t m, std::int64_t n, std::int64_t k, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Problem p{m, n, k, std::vector<std::uint16_t>(m * k), std::vector<std::uint16_t>(n * k), std::vector<std::uint16_t>(n)};
  for (auto& v : p.x) v = truncated(dist(gen));
  for (auto& v : p.w) v = truncated(dist(gen));
  for (auto& v : p.bias) v = truncated(dist(gen));
  return p;
}

// One bfloat16 rounding of the result (2^-8 relative) plus float32 accumulation error.
void expect_product(const Problem& p, const std::vector<std::uint16_t>& y, bool with_bias, const char* what) {
  for (std::int64_t r = 0; r < p.m; ++r) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      const double b = with_bias ? float_of(p.bias[j]) : 0.0;
      double want = b, scale = std::fabs(b);
      for (std::int64_t q = 0; q < p.k; ++q) {
        const double t = static_cast<double>(float_of(p.x[r * p.k + q])) * float_of(p.w[j * p.k + q]);
        want += t;
        scale += std::fabs(t);
      }
      const double got = float_of(y[r * p.n + j]);
      ASSERT_NEAR(got, want, std::fabs(want) * 0x1p-8 + scale * 1e-6)
          << what << ": m " << p.m << " k " << p.k << " row " << r << " col " << j;
    }
  }
}

// Two threads, as a rank runs (the per-thread buffers must be handed to the worker threads).
class Bf16Rows : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = at::get_num_threads();
    at::set_num_threads(2);
  }
  void TearDown() override { at::set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_F(Bf16Rows, MatchesTheExactProductWithinOneRoundingAndRowsAreIndependent) {
  if (!evalrun::ops::have_bf16_rows_kernel()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2";
  for (const evalrun::ops::Isa isa : evalrun::ops::vector_isas_of_this_cpu()) {
    const evalrun::ops::ScopedIsaCap cap(isa);
    SCOPED_TRACE(evalrun::ops::to_string(isa));
    std::mt19937 gen(3);
    // k covers both kernels' steps (64 and 32 values) with one, two and three partial vectors.
    for (const std::int64_t k : {1, 7, 8, 9, 17, 31, 32, 33, 63, 64, 65, 97, 768, 770}) {
      const Problem p = random_problem(evalrun::ops::kBf16RowsMax, 131, k, gen);
      std::vector<std::uint16_t> y(p.m * p.n);
      linear_bf16_rows(p.x.data(), p.m, k, p.w.data(), p.bias.data(), p.n, y.data());
      expect_product(p, y, true, "kernel");
      // Each row count gives each row exactly what it gave among 8 rows (on AVX2 rows 5-8 are a
      // second group); no bias is no bias.
      for (std::int64_t rows = 1; rows < p.m; ++rows) {
        std::vector<std::uint16_t> some(rows * p.n);
        const std::int64_t r0 = p.m - rows;
        linear_bf16_rows(p.x.data() + r0 * k, rows, k, p.w.data(), p.bias.data(), p.n, some.data());
        for (std::int64_t i = 0; i < rows * p.n; ++i) ASSERT_EQ(some[i], y[r0 * p.n + i]) << "k " << k << " rows " << rows;
      }
      std::vector<std::uint16_t> nobias(p.m * p.n);
      linear_bf16_rows(p.x.data(), p.m, k, p.w.data(), nullptr, p.n, nobias.data());
      expect_product(p, nobias, false, "kernel, no bias");
    }
  }
  EXPECT_THROW(linear_bf16_rows(nullptr, 9, 1, nullptr, nullptr, 1, nullptr), std::invalid_argument);
}

// The GEMM of CPUs without AVX512-BF16, on any CPU, in both weight layouts: every row count (the
// float32 GEMM's row kernel and matmul routes), several tiles of weight rows with a partial last
// one, accumulation into y (beta 1), and tile buffers reused between calls of different shapes.
TEST_F(Bf16Rows, FloatTilesMatchTheExactProduct) {
  using evalrun::ops::Bf16Layout;
  std::mt19937 gen(5);
  for (const std::int64_t m : {1, 4, 5, 9, 33}) {
    for (const std::int64_t k : {3, 64, 770}) {
      const std::int64_t n = k == 770 ? 700 : 131;  // 700 rows of 770: three tiles of 340 and a partial one
      const Problem p = random_problem(m, n, k, gen);
      std::vector<std::uint16_t> w_in_out(n * k);  // the same weights pre-transposed
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t q = 0; q < k; ++q) w_in_out[q * n + j] = p.w[j * k + q];
      }
      for (const Bf16Layout layout : {Bf16Layout::out_in, Bf16Layout::in_out}) {
        SCOPED_TRACE(layout == Bf16Layout::out_in ? "[out, in]" : "[in, out]");
        const std::uint16_t* w = layout == Bf16Layout::out_in ? p.w.data() : w_in_out.data();
        std::vector<std::uint16_t> y(m * n);
        evalrun::ops::linear_bf16_tiles(p.x.data(), m, k, w, layout, p.bias.data(), n, y.data());
        expect_product(p, y, true, "tiles");
        evalrun::ops::linear_bf16_tiles(p.x.data(), m, k, w, layout, nullptr, n, y.data());
        expect_product(p, y, false, "tiles, no bias");
        // beta 1: y (the product without bias) plus the product with bias, rounded once.
        std::vector<std::uint16_t> twice = y;
        evalrun::ops::linear_bf16_tiles(p.x.data(), m, k, w, layout, p.bias.data(), n, twice.data(), 1.0f);
        for (std::int64_t i = 0; i < m * n; ++i) {
          const float want = 2.0f * float_of(y[i]) + float_of(p.bias[i % n]);
          ASSERT_NEAR(float_of(twice[i]), want, std::fabs(want) * 0x1p-7 + 0.02 * std::sqrt(double(k))) << "beta 1, " << i;
        }
      }
    }
  }
  EXPECT_THROW(evalrun::ops::linear_bf16_tiles(nullptr, 0, 1, nullptr, Bf16Layout::out_in, nullptr, 1, nullptr),
               std::invalid_argument);
}

}  // namespace
