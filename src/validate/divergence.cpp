#include "validate/divergence.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace evalrun {
namespace {

std::vector<double> log_softmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
  return out;
}

}  // namespace

TokenDivergence token_divergence(const std::vector<double>& ref_logits, const std::vector<double>& cand_logits) {
  TokenDivergence d;
  if (ref_logits.empty() || ref_logits.size() != cand_logits.size()) {
    d.cross_entropy = d.kl = d.mean_abs_prob_diff = std::numeric_limits<double>::infinity();
    return d;
  }
  const auto lr = log_softmax(ref_logits), lc = log_softmax(cand_logits);
  double diff = 0;
  for (std::size_t i = 0; i < lr.size(); ++i) {
    const double pr = std::exp(lr[i]);
    if (pr > 0) {
      d.cross_entropy -= pr * lc[i];
      d.ref_entropy -= pr * lr[i];
      d.kl += pr * (lr[i] - lc[i]);  // summed directly: CE - H loses precision when both are large
    }
    diff += std::fabs(pr - std::exp(lc[i]));
  }
  d.kl = std::max(0.0, d.kl);
  d.mean_abs_prob_diff = diff / static_cast<double>(lr.size());
  return d;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double v : values) s += v;
  return s / static_cast<double>(values.size());
}

std::size_t common_prefix(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace evalrun
