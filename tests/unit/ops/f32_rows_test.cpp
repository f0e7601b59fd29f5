// The float32 decode-step kernel and ops::linear_f32 (the kernel for few rows, oneDNN's matmul or
// sgemm for more) against a double-precision product, with row strides, alpha and accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/f32_rows.hpp"
#include "ops/gemm.hpp"
#include "ops/isa.hpp"

namespace {

struct Problem {
  std::int64_t m, n, k, ldx, ldy;
  std::vector<float> x, w, y0;
};

Problem random_problem(std::int64_t m, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Problem p{m, n, k, k + 3, n + 5, {}, {}, {}};  // padded strides: nothing past a row may be read or written
  p.x.resize(static_cast<std::size_t>(m * p.ldx));
  p.w.resize(static_cast<std::size_t>(n * k));
  p.y0.resize(static_cast<std::size_t>(m * p.ldy));
  for (auto& v : p.x) v = dist(gen);
  for (auto& v : p.w) v = dist(gen);
  for (auto& v : p.y0) v = dist(gen);
  return p;
}

// Checks y = beta * y0 + alpha * x W^T (double reference, float32 accumulation error allowed) and
// that the stride padding of y kept y0's values.
void expect_product(const Problem& p, const std::vector<float>& y, float alpha, float beta, const char* what) {
  for (std::int64_t r = 0; r < p.m; ++r) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      double want = 0, scale = 0;
      for (std::int64_t q = 0; q < p.k; ++q) {
        const double t = static_cast<double>(p.x[r * p.ldx + q]) * p.w[j * p.k + q];
        want += t;
        scale += std::fabs(t);
      }
      want = alpha * want + (beta != 0.0f ? p.y0[r * p.ldy + j] : 0.0);
      ASSERT_NEAR(y[r * p.ldy + j], want, (std::fabs(alpha) * scale + std::fabs(p.y0[r * p.ldy + j])) * 2e-6)
          << what << ": m " << p.m << " k " << p.k << " row " << r << " col " << j;
    }
    for (std::int64_t j = p.n; j < p.ldy; ++j) ASSERT_EQ(y[r * p.ldy + j], p.y0[r * p.ldy + j]) << what << ": padding";
  }
}

TEST(F32Rows, MatchesTheProductAndRowsAreIndependent) {
  if (!evalrun::ops::have_f32_rows_kernel()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  for (const evalrun::ops::Isa isa : evalrun::ops::vector_isas_of_this_cpu()) {
    const evalrun::ops::ScopedIsaCap cap(isa);
    SCOPED_TRACE(evalrun::ops::to_string(isa));
    // k covers both kernels' tails (steps of 64 and 32 floats) and one, two and three partial vectors.
    for (const std::int64_t k : {1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 63, 64, 65, 100, 768, 770}) {
      const std::int64_t n = 131, m = evalrun::ops::kF32RowsMax;
      const Problem p = random_problem(m, n, k, static_cast<std::uint32_t>(k));
      for (const float beta : {0.0f, 1.0f}) {
        std::vector<float> y = p.y0;
        evalrun::ops::linear_f32_rows(p.x.data(), m, p.ldx, p.w.data(), n, k, y.data(), p.ldy, 0.75f, beta);
        expect_product(p, y, 0.75f, beta, "kernel");
        // Each row alone gives exactly the bits it gave among kF32RowsMax rows (decode results must not
        // depend on the batch).
        for (std::int64_t r = 0; r < m; ++r) {
          std::vector<float> one(p.y0.begin() + r * p.ldy, p.y0.begin() + (r + 1) * p.ldy);
          evalrun::ops::linear_f32_rows(p.x.data() + r * p.ldx, 1, p.ldx, p.w.data(), n, k, one.data(), p.ldy, 0.75f,
                                        beta);
          for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], y[r * p.ldy + j]) << "k " << k << " row " << r << " col " << j;
        }
        // So do the first two and the first three rows (on AVX2 four rows take two passes, three one).
        for (const std::int64_t rows : {std::int64_t{2}, std::int64_t{3}}) {
          std::vector<float> some(p.y0.begin(), p.y0.begin() + rows * p.ldy);
          evalrun::ops::linear_f32_rows(p.x.data(), rows, p.ldx, p.w.data(), n, k, some.data(), p.ldy, 0.75f, beta);
          for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(some[r * p.ldy + j], y[r * p.ldy + j]) << "k " << k << " rows " << rows;
          }
        }
      }
    }
  }
  EXPECT_THROW(evalrun::ops::linear_f32_rows(nullptr, evalrun::ops::kF32RowsMax + 1, 1, nullptr, 1, 1, nullptr, 1, 1.0f,
                                             0.0f),
               std::invalid_argument);
}

// Every row count on every route: the row kernel (default limit), oneDNN's matmul (limit 0 sends
// even one row there) and the at::mm fallback.
TEST(F32Rows, LinearF32TakesEveryRowCountOnEveryRoute) {
  EXPECT_EQ(evalrun::ops::f32_rows_limit(), evalrun::ops::kF32RowsDefault);
  for (const std::int64_t limit : {evalrun::ops::kF32RowsDefault, std::int64_t{0}}) {
    evalrun::ops::set_f32_rows_limit(limit);
    for (const bool onednn : {true, false}) {
      evalrun::ops::set_onednn_sgemm_enabled(onednn);
      for (const std::int64_t m : {1, 3, 4, 5, 8, 17, 64}) {
        const Problem p = random_problem(m, 70, 129, static_cast<std::uint32_t>(m));
        for (const float beta : {0.0f, 1.0f}) {
          std::vector<float> y = p.y0;
          evalrun::ops::linear_f32(p.x.data(), m, p.ldx, p.w.data(), p.n, p.k, y.data(), p.ldy, 1.5f, beta);
          expect_product(p, y, 1.5f, beta, onednn ? "oneDNN" : "fallback");
        }
      }
    }
  }
  evalrun::ops::set_onednn_sgemm_enabled(true);
  evalrun::ops::set_f32_rows_limit(evalrun::ops::kF32RowsDefault);
  evalrun::ops::set_f32_rows_limit(100);
  EXPECT_EQ(evalrun::ops::f32_rows_limit(), evalrun::ops::kF32RowsMax);
  evalrun::ops::set_f32_rows_limit(evalrun::ops::kF32RowsDefault);
}

}  // namespace
