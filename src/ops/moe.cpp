#include "ops/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace evalrun::ops {

void moe_route_top_k(const float* router_logits, std::int64_t rows, std::int64_t experts, std::int64_t k,
                     std::int64_t* chosen, float* weights) {
  if (k < 1 || k > experts) throw std::invalid_argument("moe_route_top_k: k must be in [1, experts]");
  std::vector<float> p(static_cast<std::size_t>(experts));
  std::vector<std::int64_t> order(static_cast<std::size_t>(experts));
  for (std::int64_t m = 0; m < rows; ++m) {
    const float* l = router_logits + m * experts;
    const float mx = *std::max_element(l, l + experts);
    float sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    for (std::int64_t e = 0; e < experts; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Largest first; equal probabilities keep the lower index first.
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return p[a] > p[b]; });
    float top = 0;
    for (std::int64_t j = 0; j < k; ++j) top += p[order[j]];
    for (std::int64_t j = 0; j < k; ++j) {
      chosen[m * k + j] = order[j];
      weights[m * k + j] = p[order[j]] / top;
    }
  }
}

std::vector<ExpertRows> moe_rows_per_expert(const std::int64_t* chosen, const float* weights, std::int64_t rows,
                                            std::int64_t experts, std::int64_t k) {
  std::vector<ExpertRows> out(static_cast<std::size_t>(experts));
  for (std::int64_t m = 0; m < rows; ++m) {
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = chosen[m * k + j];
      out[e].rows.push_back(m);
      out[e].weights.push_back(weights[m * k + j]);
    }
  }
  return out;
}

void moe_accumulate(const ExpertRows& e, const float* y, std::int64_t width, float* acc) {
  for (std::size_t r = 0; r < e.rows.size(); ++r) {
    float* dst = acc + e.rows[r] * width;
    const float* src = y + static_cast<std::int64_t>(r) * width;
    const float w = e.weights[r];
    for (std::int64_t i = 0; i < width; ++i) dst[i] += w * src[i];
  }
}

}  // namespace evalrun::ops
