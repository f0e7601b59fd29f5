#include <gtest/gtest.h>

#include <cmath>

#include "validate/divergence.hpp"

using namespace evalrun;

TEST(Divergence, CrossEntropyEntropyKlAndProbabilityDiffByHand) {
  // ref softmax([0, ln 3]) = [0.25, 0.75]; cand softmax([0, 0]) = [0.5, 0.5]
  const auto d = token_divergence({0.0, std::log(3.0)}, {0.0, 0.0});
  EXPECT_NEAR(d.cross_entropy, std::log(2.0), 1e-12);
  EXPECT_NEAR(d.ref_entropy, 0.25 * std::log(4.0) + 0.75 * std::log(4.0 / 3.0), 1e-12);
  EXPECT_NEAR(d.kl, 0.13081203594113713, 1e-12);
  EXPECT_NEAR(d.mean_abs_prob_diff, 0.25, 1e-12);
}

TEST(Divergence, IdenticalAndShiftedLogitsHaveZeroKl) {
  const auto d = token_divergence({1.0, 2.0, 3.0}, {11.0, 12.0, 13.0});  // softmax ignores a common shift
  EXPECT_NEAR(d.kl, 0.0, 1e-12);
  EXPECT_NEAR(d.mean_abs_prob_diff, 0.0, 1e-12);
  EXPECT_NEAR(d.cross_entropy, d.ref_entropy, 1e-12);
  EXPECT_TRUE(std::isinf(token_divergence({}, {}).kl));
}

TEST(Divergence, PercentileInterpolatesLikeNumpy) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_EQ(common_prefix({1, 2, 3}, {1, 2, 4}), 2u);
  EXPECT_EQ(common_prefix({1, 2}, {1, 2, 4}), 2u);
}
