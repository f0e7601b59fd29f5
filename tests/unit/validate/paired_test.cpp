// validate/paired: McNemar's exact test and the paired accuracy of two runs, by hand.
#include "validate/paired.hpp"

#include <gtest/gtest.h>

#include "common/errors.hpp"

namespace evalrun {
namespace {

TEST(Paired, McNemarExactByHand) {
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_NEAR(mcnemar_exact_p(0, 5), 2.0 / 32.0, 1e-12);
  EXPECT_NEAR(mcnemar_exact_p(9, 1), 22.0 / 1024.0, 1e-12);  // 2 * (1 + 10) / 2^10
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(3, 3), 1.0);              // 2 * 42 / 64 > 1
  EXPECT_LT(mcnemar_exact_p(200, 100), 1e-6);
}

TEST(Paired, AccuracyDeltaAndDisagreements) {
  // The reference gets documents 0, 1 right, the candidate 0, 2, 3.
  const auto a = paired_accuracy({1, 1, 0, 0}, {1, 0, 1, 1}, "t");
  EXPECT_EQ(a.n, 4u);
  EXPECT_DOUBLE_EQ(a.ref, 0.5);
  EXPECT_DOUBLE_EQ(a.cand, 0.75);
  EXPECT_DOUBLE_EQ(a.delta, 0.25);
  EXPECT_EQ(a.ref_only, 1u);
  EXPECT_EQ(a.cand_only, 2u);
  EXPECT_NEAR(a.p, 1.0, 1e-12);  // 2 * (1 + 3) / 8 > 1
  EXPECT_THROW(paired_accuracy({1, 0}, {1}, "t"), InputError);
}

}  // namespace
}  // namespace evalrun
