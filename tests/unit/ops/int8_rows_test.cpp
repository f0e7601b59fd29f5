// The INT8 decode-step kernel (every version this CPU runs, on two threads) against the exact integer
// product: signed activations and unsigned ones with a zero point, 1-4 rows, row strides, tails of
// every length class of both versions' steps (128 and 32 bytes).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ops/int8_rows.hpp"
#include "ops/isa.hpp"

namespace {

void expect_exact_products();

TEST(Int8Rows, EqualsTheExactProduct) {
  if (!evalrun::ops::have_int8_rows_kernel()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2";
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (const evalrun::ops::Isa isa : evalrun::ops::vector_isas_of_this_cpu()) {
    const evalrun::ops::ScopedIsaCap cap(isa);
    SCOPED_TRACE(evalrun::ops::to_string(isa));
    expect_exact_products();
  }
  at::set_num_threads(threads);
  EXPECT_THROW(evalrun::ops::int8_rows(nullptr, true, 1, 1, 1, nullptr, 1, nullptr, 1, 1, nullptr, 1), std::invalid_argument);
  EXPECT_THROW(evalrun::ops::int8_rows(nullptr, true, 0, 1, 4, nullptr, 3, nullptr, 1, 4, nullptr, 1), std::invalid_argument);
}

void expect_exact_products() {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> byte(-128, 127), ubyte(0, 255);
  for (const std::int64_t k : {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 768, 770}) {
    for (const bool a_signed : {true, false}) {
      // 700 rows of 768 or more: several blocks of 64 columns a thread, so both threads run.
      // Weight rows ldw apart, the gap between them filled with 127s a kernel must not read.
      const std::int64_t n = k >= 768 ? 700 : 70, lda = k + 5, ldw = k + 3, ldc = n + 3;
      const std::int32_t zero = a_signed ? 0 : 131;
      std::vector<std::int8_t> w(static_cast<std::size_t>(n * ldw), 127);
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t p = 0; p < k; ++p) w[static_cast<std::size_t>(j * ldw + p)] = static_cast<std::int8_t>(byte(gen));
      }
      w[0] = -128;  // the extremes multiply too
      std::vector<std::uint8_t> a(static_cast<std::size_t>(evalrun::ops::kInt8RowsMax * lda));
      for (auto& v : a) v = static_cast<std::uint8_t>(a_signed ? static_cast<std::uint8_t>(byte(gen)) : ubyte(gen));
      a[0] = a_signed ? 0x80 : 0;  // -128, and the largest |a - zero| of unsigned ones
      std::vector<std::int32_t> sums(static_cast<std::size_t>(n));
      evalrun::ops::int8_row_sums(w.data(), ldw, n, k, sums.data());
      for (std::int64_t m = 1; m <= evalrun::ops::kInt8RowsMax; ++m) {
        std::vector<std::int32_t> c(static_cast<std::size_t>(m * ldc), -7);
        evalrun::ops::int8_rows(a.data(), a_signed, zero, m, lda, w.data(), ldw, sums.data(), n, k, c.data(), ldc);
        for (std::int64_t r = 0; r < m; ++r) {
          for (std::int64_t j = 0; j < n; ++j) {
            std::int64_t want = 0;
            for (std::int64_t p = 0; p < k; ++p) {
              const std::int64_t av = a_signed ? static_cast<std::int8_t>(a[r * lda + p]) : a[r * lda + p] - zero;
              want += av * w[j * ldw + p];
            }
            ASSERT_EQ(c[r * ldc + j], want) << "k " << k << (a_signed ? " s8" : " u8") << " m " << m << " row " << r
                                            << " col " << j;
          }
          for (std::int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[r * ldc + j], -7) << "padding written";
        }
      }
    }
  }
}

TEST(Int8Rows, LimitIsClamped) {
  EXPECT_EQ(evalrun::ops::int8_rows_limit(), evalrun::ops::kInt8RowsMax);
  evalrun::ops::set_int8_rows_limit(-3);
  EXPECT_EQ(evalrun::ops::int8_rows_limit(), 0);
  evalrun::ops::set_int8_rows_limit(99);
  EXPECT_EQ(evalrun::ops::int8_rows_limit(), evalrun::ops::kInt8RowsMax);
}

}  // namespace
