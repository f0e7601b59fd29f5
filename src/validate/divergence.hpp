// The numbers behind the comparison, on plain vectors so tests can check them by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace evalrun {

// Two logit vectors over the same ids (a top-k subset or a whole row), each turned into a
// distribution by its own softmax.
struct TokenDivergence {
  double cross_entropy = 0;       // -sum p_ref log p_cand
  double ref_entropy = 0;         // -sum p_ref log p_ref
  double kl = 0;                  // cross_entropy - ref_entropy = KL(ref || cand) >= 0
  double mean_abs_prob_diff = 0;  // mean over the ids of |p_ref - p_cand|
};
TokenDivergence token_divergence(const std::vector<double>& ref_logits, const std::vector<double>& cand_logits);

// q in [0, 100]; linear interpolation between closest ranks (numpy's default). Empty input: NaN.
double percentile(std::vector<double> values, double q);

double mean(const std::vector<double>& values);  // NaN when empty

// Length of the common prefix; equals both sizes when the sequences are identical.
std::size_t common_prefix(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

}  // namespace evalrun
