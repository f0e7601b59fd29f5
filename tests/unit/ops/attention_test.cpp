// The encoders' attention op with its products on bfloat16 operands (AttentionShape::bf16_products)
// against the float32 products, and the vectorized bfloat16 roundings of ops/bfloat16.hpp it uses.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/attention.hpp"
#include "ops/bf16_rows.hpp"
#include "ops/bfloat16.hpp"
#include "ops/gemm.hpp"
#include "ops/isa.hpp"

namespace {

using namespace evalrun::ops;

TEST(Bf16OfFloats, RoundsAsTheScalarConversionOnEveryKernelLevel) {
  std::mt19937 gen(3);
  std::vector<float> x;
  // Ties (low half exactly 0x8000) of both parities, denormals, infinities, NaNs, the largest finite
  // value (rounds to infinity), zeros of both signs, and random bit patterns.
  for (std::uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00000001u, 0x80008000u, 0x7f800000u, 0xff800000u,
                             0x7fc00001u, 0xffffffffu, 0x7f7fffffu, 0x00000000u, 0x80000000u}) {
    x.push_back(std::bit_cast<float>(bits));
  }
  while (x.size() < 1000) x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
  for (const Isa isa : isas_of_this_cpu()) {
    ScopedIsaCap cap(isa);
    for (const std::int64_t n : {0, 1, 15, 16, 17, 1000}) {
      std::vector<std::uint16_t> got(static_cast<std::size_t>(n) + 1, 0xabcd);
      bf16_of_floats(x.data(), n, got.data());
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], bf16_of(x[i])) << to_string(isa) << " n " << n << " value bits 0x" << std::hex
                                         << std::bit_cast<std::uint32_t>(x[i]);
      }
      EXPECT_EQ(got[n], 0xabcd) << to_string(isa) << ": wrote past n = " << n;
    }
  }
}

TEST(RoundToBf16, ArrayFormsRoundAsTheScalarOnEveryKernelLevel) {
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 40.0f);
  std::vector<float> x;
  for (std::uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00000001u, 0x80008000u, 0x7f800000u, 0xff800000u,
                             0x7fc00001u, 0xffffffffu, 0x7f7fffffu, 0x00000000u, 0x80000000u}) {
    x.push_back(std::bit_cast<float>(bits));
  }
  while (x.size() < 600) x.push_back(x.size() % 2 == 0 ? normal(gen) : std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
  auto scalar = [](float v, float divisor, float multiplier) {
    const float dot = round_to_bf16(v);
    return round_to_bf16(divisor != 0.0f ? dot / divisor : dot * multiplier);
  };
  auto same = [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); };
  for (const Isa isa : isas_of_this_cpu()) {
    ScopedIsaCap cap(isa);
    for (const std::int64_t n : {0, 1, 7, 8, 9, 16, 17, 600}) {
      std::vector<float> plain(x.begin(), x.begin() + n), div(plain), mul(plain);
      plain.push_back(1.2345f), div.push_back(1.2345f), mul.push_back(1.2345f);
      round_to_bf16(plain.data(), n);
      round_scaled_to_bf16(div.data(), n, std::sqrt(24.0f), 1.0f);
      round_scaled_to_bf16(mul.data(), n, 0.0f, 0.125f);
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same(plain[i], round_to_bf16(x[i]))) << to_string(isa) << " n " << n << " i " << i;
        ASSERT_TRUE(same(div[i], scalar(x[i], std::sqrt(24.0f), 1.0f))) << to_string(isa) << " n " << n << " i " << i;
        ASSERT_TRUE(same(mul[i], scalar(x[i], 0.0f, 0.125f))) << to_string(isa) << " n " << n << " i " << i;
      }
      EXPECT_EQ(plain[n], 1.2345f);
      EXPECT_EQ(div[n], 1.2345f);
      EXPECT_EQ(mul[n], 1.2345f);
    }
  }
}

// An encoder's fused q | k | v rows [batch * seq, 3 * heads * d] with padding at the end of row 1.
struct Case {
  std::int64_t batch = 2, seq = 37, heads = 3, d = 16;
  std::vector<float> qkv;
  std::vector<std::int64_t> mask;
  std::int64_t width() const { return heads * d; }

  explicit Case(bool bf16_values) {
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    qkv.resize(static_cast<std::size_t>(batch * seq * 3 * width()));
    for (float& v : qkv) v = bf16_values ? round_to_bf16(normal(gen)) : normal(gen);
    mask.assign(static_cast<std::size_t>(batch * seq), 1);
    for (std::int64_t t = seq - 9; t < seq; ++t) mask[seq + t] = 0;
  }

  std::vector<float> run(bool bf16_model, bool bf16_products) const {
    AttentionShape a;
    a.batch = batch;
    a.queries = a.keys = seq;
    a.heads = a.kv_heads = heads;
    a.head_dim = d;
    a.scale = 0.25f;
    a.bf16 = bf16_model;
    if (bf16_model) a.scale = 1.0f, a.score_divisor = 4.0f;
    a.bf16_products = bf16_products;
    const std::int64_t H = width();
    const float* base = qkv.data();
    const HeadRows q{base, seq * 3 * H, d, 3 * H}, k{base + H, seq * 3 * H, d, 3 * H}, v{base + 2 * H, seq * 3 * H, d, 3 * H};
    std::vector<float> out(static_cast<std::size_t>(batch * seq * H));
    attention_f32(a, q, k, v, mask.data(), out.data(), seq * H, H);
    return out;
  }

  // softmax(q k^T / 4) v in double over the unmasked keys, with q, k, v rounded to bfloat16 and the
  // probabilities rounded to bfloat16 before the second product (what bf16_products computes).
  std::vector<double> reference() const {
    const std::int64_t H = width();
    std::vector<double> out(static_cast<std::size_t>(batch * seq * H));
    auto at = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h, std::int64_t i) {
      return static_cast<double>(round_to_bf16(qkv[(b * seq + t) * 3 * H + part * H + h * d + i]));
    };
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t r = 0; r < seq; ++r) {
          std::vector<double> p(static_cast<std::size_t>(seq), 0.0);
          double mx = -INFINITY, sum = 0;
          for (std::int64_t j = 0; j < seq; ++j) {
            if (mask[b * seq + j] == 0) continue;
            double dot = 0;
            for (std::int64_t i = 0; i < d; ++i) dot += at(b, r, 0, h, i) * at(b, j, 1, h, i);
            p[j] = dot / 4.0;
            mx = std::max(mx, p[j]);
          }
          for (std::int64_t j = 0; j < seq; ++j) sum += p[j] = mask[b * seq + j] == 0 ? 0.0 : std::exp(p[j] - mx);
          for (std::int64_t i = 0; i < d; ++i) {
            double o = 0;
            for (std::int64_t j = 0; j < seq; ++j) o += round_to_bf16(static_cast<float>(p[j] / sum)) * at(b, j, 2, h, i);
            out[(b * seq + r) * H + h * d + i] = o;
          }
        }
      }
    }
    return out;
  }
};

TEST(AttentionBf16Products, FloatModelMatchesItsBf16OperandsInDoublePrecision) {
  if (!have_bf16_gemm()) GTEST_SKIP() << "no native bfloat16 products on this CPU";
  const Case c(/*bf16_values=*/false);
  const auto got = c.run(false, true), exact = c.run(false, false);
  const auto want = c.reference();
  double worst = 0, worst_f32 = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    worst_f32 = std::max(worst_f32, std::abs(static_cast<double>(exact[i]) - want[i]));
  }
  // Left: float32 sums and a probability now and then rounded the other way (one bfloat16 step,
  // 2^-8 of a probability); the float32 products on unrounded operands are ~100x farther away.
  EXPECT_LT(worst, 2e-3);
  EXPECT_GT(worst_f32, 4 * worst) << "the reference does not tell bfloat16 operands from float32 ones";
}

TEST(AttentionBf16Products, Bf16ModelEqualsTheFloat32ProductsUpToTheOrderOfTheSums) {
  if (!have_bf16_gemm()) GTEST_SKIP() << "no native bfloat16 products on this CPU";
  const Case c(/*bf16_values=*/true);
  const auto got = c.run(true, true), want = c.run(true, false);
  std::size_t same = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    same += got[i] == want[i];
    // Both are bfloat16 values: at most one bfloat16 step apart (a sum rounded the other way).
    ASSERT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) * 0x1p-7f + 1e-30f) << "element " << i;
  }
  EXPECT_GE(static_cast<double>(same) / got.size(), 0.98) << same << " of " << got.size() << " identical";
}

}  // namespace
