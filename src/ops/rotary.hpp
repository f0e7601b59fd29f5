// Rotary position embeddings on raw float32 buffers (rotate_half convention, as transformers'
// apply_rotary_pos_emb).
#pragma once

#include <cstdint>

#include "ops/bfloat16.hpp"

namespace evalrun::ops {

// cos / sin [M, half] for M positions: angle = inv_freq[i] * (position / position_divisor) in float32,
// as HF computes it (the divisor is linear rope scaling's factor, which divides the float32 positions).
void rope_angles(const float* inv_freq, std::int64_t half, const std::int64_t* positions, std::int64_t M, float* cos,
                 float* sin, float position_divisor = 1.0f);

// In place, one head vector of 2 * half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
inline void rope_rotate_head(float* v, const float* cos, const float* sin, std::int64_t half) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * cos[i] + (-x2) * sin[i];
    v[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

// The same as a bfloat16 model computes q * cos + rotate_half(q) * sin (cos and sin already rounded
// to bfloat16): each product rounded to bfloat16, then their sum.
inline void rope_rotate_head_bf16(float* v, const float* cos, const float* sin, std::int64_t half) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float x1 = v[i], x2 = v[i + half];
    v[i] = round_to_bf16(round_to_bf16(x1 * cos[i]) + round_to_bf16(-x2 * sin[i]));
    v[i + half] = round_to_bf16(round_to_bf16(x2 * cos[i]) + round_to_bf16(x1 * sin[i]));
  }
}

}  // namespace evalrun::ops
