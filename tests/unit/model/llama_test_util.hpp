// Helpers shared by the Llama tests: greedy generation through LlamaModel::forward and the cache,
// for one or several left-padded prompts.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/llama.hpp"

namespace evalrun::testing {

inline float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return max_abs_diff(a.data(), b.data(), std::min(a.size(), b.size()));
}

inline std::int64_t argmax(const float* p, std::int64_t n) { return std::max_element(p, p + n) - p; }

struct Generation {
  std::vector<std::vector<std::int64_t>> tokens;            // [row][step]
  std::vector<std::vector<std::vector<float>>> step_logits;  // [row][step][vocab]: the logits that chose tokens
};

// Greedy decoding of `steps` tokens for all prompts at once, left-padded to the longest (pad id 0,
// position 0, key_mask 0). `forced`, if given, replaces the argmax by the given tokens (teacher forcing).
inline Generation generate(LlamaModel& model, const std::vector<std::vector<std::int64_t>>& prompts, int steps,
                           const std::vector<std::vector<std::int64_t>>* forced = nullptr) {
  const std::int64_t B = static_cast<std::int64_t>(prompts.size()), V = model.config().vocab_size;
  std::int64_t L = 0;
  for (const auto& p : prompts) L = std::max<std::int64_t>(L, p.size());
  const std::int64_t cap = L + steps;
  std::vector<std::int64_t> ids(B * L, 0), pos(B * L, 0), full_mask(B * cap, 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = prompts[b].size(), off = L - n;
    for (std::int64_t t = 0; t < n; ++t) {
      ids[b * L + off + t] = prompts[b][t];
      pos[b * L + off + t] = t;
    }
    for (std::int64_t t = off; t < cap; ++t) full_mask[b * cap + t] = 1;
  }
  auto mask_upto = [&](std::int64_t T) {
    std::vector<std::int64_t> m(B * T);
    for (std::int64_t b = 0; b < B; ++b) std::copy_n(full_mask.begin() + b * cap, T, m.begin() + b * T);
    return m;
  };
  auto cache = model.new_cache(B, cap);
  std::vector<float> logits;
  auto mask = mask_upto(L);
  model.forward(ids.data(), pos.data(), mask.data(), B, L, *cache, false, logits);
  Generation g;
  g.tokens.assign(B, {});
  g.step_logits.assign(B, {});
  for (int s = 0; s < steps; ++s) {
    std::vector<std::int64_t> next(B), next_pos(B);
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = logits.data() + b * V;
      g.step_logits[b].emplace_back(row, row + V);
      next[b] = forced != nullptr ? (*forced)[b][s] : argmax(row, V);
      g.tokens[b].push_back(next[b]);
      next_pos[b] = static_cast<std::int64_t>(prompts[b].size()) + s;
    }
    if (s + 1 == steps) break;
    mask = mask_upto(L + s + 1);
    model.forward(next.data(), next_pos.data(), mask.data(), B, 1, *cache, false, logits);
  }
  EXPECT_EQ(cache->length(), L + steps - 1);
  return g;
}

}  // namespace evalrun::testing
