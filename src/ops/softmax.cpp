#include "ops/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace evalrun::ops {

void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t last) {
  causal_masked_softmax_row(s, n, key_mask, 0, last);
}

void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
                               std::int64_t last) {
  auto allowed = [&](std::int64_t j) { return j >= first && j <= last && key_mask[j] != 0; };
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < n; ++j) {
    if (allowed(j)) mx = std::max(mx, s[j]);
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + n, 0.0f);
    return;
  }
  float sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = allowed(j) ? std::exp(s[j] - mx) : 0.0f;
    s[j] = e;
    sum += e;
  }
  for (std::int64_t j = 0; j < n; ++j) s[j] /= sum;
}

}  // namespace evalrun::ops
