// The attention softmax row against a double-precision softmax over the same allowed keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/bfloat16.hpp"
#include "ops/softmax.hpp"

namespace {

using evalrun::ops::causal_masked_softmax_row;

std::vector<double> reference(const std::vector<float>& s, const std::vector<std::int64_t>& mask, std::int64_t first,
                              std::int64_t last) {
  const std::int64_t n = static_cast<std::int64_t>(s.size());
  auto allowed = [&](std::int64_t j) { return j >= first && j <= last && mask[j] != 0; };
  double mx = -INFINITY, sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (allowed(j)) mx = std::max(mx, static_cast<double>(s[j]));
  }
  std::vector<double> p(s.size(), 0.0);
  if (mx == -INFINITY) return p;
  for (std::int64_t j = 0; j < n; ++j) {
    if (allowed(j)) sum += p[j] = std::exp(s[j] - mx);
  }
  for (double& v : p) v /= sum;
  return p;
}

double max_allowed(const std::vector<float>& s, const std::vector<std::int64_t>& mask, std::int64_t first,
                   std::int64_t last) {
  double mx = -INFINITY;
  for (std::int64_t j = first; j <= last; ++j) {
    if (mask[j] != 0) mx = std::max(mx, static_cast<double>(s[j]));
  }
  return mx;
}

TEST(SoftmaxRow, MatchesDoublePrecisionOverTheAllowedKeys) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> score(-30.0f, 30.0f);
  for (const std::int64_t n : {1, 5, 15, 16, 17, 64, 383, 384, 385}) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> s(n);
      std::vector<std::int64_t> mask(n);
      for (std::int64_t j = 0; j < n; ++j) {
        s[j] = score(gen);
        mask[j] = gen() % 4 == 0 ? 0 : 1 + static_cast<std::int64_t>(gen() % 3);  // any nonzero value allows
      }
      // Full rows, causal prefixes and sliding windows.
      const std::int64_t last = trial % 2 == 0 ? n - 1 : static_cast<std::int64_t>(gen() % n);
      const std::int64_t first = trial % 4 == 3 ? static_cast<std::int64_t>(gen() % (last + 1)) : 0;
      const auto want = reference(s, mask, first, last);
      std::vector<float> got = s;
      causal_masked_softmax_row(got.data(), n, mask.data(), first, last);
      double total = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const bool allowed = j >= first && j <= last && mask[j] != 0;
        if (!allowed) {
          EXPECT_EQ(got[j], 0.0f) << "n " << n << " key " << j << " is masked";
          continue;
        }
        // The float difference s_j - max rounds by up to half an ulp of its size, which exp turns
        // into that relative error; the rest is a few ulp of the exponential and the division.
        const double arg = std::fabs(static_cast<double>(s[j]) - max_allowed(s, mask, first, last));
        EXPECT_NEAR(got[j], want[j], (arg * 6e-8 + 5e-7) * want[j]) << "n " << n << " key " << j;
        total += got[j];
      }
      if (total > 0) {
        EXPECT_NEAR(total, 1.0, 1e-5) << "n " << n;
      }
    }
  }
}

TEST(SoftmaxRow, FarBelowTheMaximumIsZeroAndNoAllowedKeyIsAllZero) {
  std::vector<float> s = {0.0f, -1e30f, -200.0f, -80.0f, 3.0f};
  std::vector<std::int64_t> mask(s.size(), 1);
  causal_masked_softmax_row(s.data(), 5, mask.data(), 4);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[2], 0.0f);
  EXPECT_NEAR(s[3], std::exp(-83.0) / (1 + std::exp(-3.0)), 1e-40);
  EXPECT_NEAR(s[4], 1 / (1 + std::exp(-3.0)), 1e-7);
  for (float& v : s) v = 1.0f;
  std::fill(mask.begin(), mask.end(), 0);
  causal_masked_softmax_row(s.data(), 5, mask.data(), 4);
  for (float v : s) EXPECT_EQ(v, 0.0f);
}

// The bfloat16 output is the float32 softmax's probabilities rounded (ops::bf16_of), masked keys and
// a row with no allowed key 0.
TEST(SoftmaxRow, Bf16OutputIsTheFloatResultRounded) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> score(-12.0f, 12.0f);
  for (const std::int64_t n : {1, 15, 16, 17, 384, 385}) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> s(n);
      std::vector<std::int64_t> mask(n);
      for (std::int64_t j = 0; j < n; ++j) s[j] = score(gen), mask[j] = gen() % 5 == 0 ? 0 : 1;
      if (trial == 3) std::fill(mask.begin(), mask.end(), 0);
      const std::int64_t first = trial == 2 ? n / 3 : 0, last = trial == 1 ? n / 2 : n - 1;
      std::vector<float> want = s, scratch = s;
      causal_masked_softmax_row(want.data(), n, mask.data(), first, last);
      std::vector<std::uint16_t> got(static_cast<std::size_t>(n) + 1, 0xabcd);
      evalrun::ops::causal_masked_softmax_row_bf16(scratch.data(), n, mask.data(), first, last, got.data());
      for (std::int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(got[j], evalrun::ops::bf16_of(want[j])) << "n " << n << " trial " << trial << " key " << j;
      }
      EXPECT_EQ(got[n], 0xabcd) << "wrote past n = " << n;
    }
  }
}

}  // namespace
