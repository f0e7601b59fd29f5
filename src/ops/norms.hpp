// Row-wise normalisations on raw float32 buffers (the float32 fast path of the models).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// out[r] = (w + weight_offset) * (x[r] * rsqrt(mean(x[r]^2) + eps)) for `rows` rows of n, as
// LlamaRMSNorm (weight_offset 0) and GemmaRMSNorm (weight_offset 1: the stored weights are offsets
// from 1) compute it in float32 (sum of squares accumulated in double). Parallel over rows.
void rms_norm_rows(const float* x, const float* w, float* out, std::int64_t rows, std::int64_t n, float eps,
                   float weight_offset);

// out[r] = (x[r] - mean) * rsqrt(var + eps) * w + b for `rows` rows of n, as torch's LayerNorm
// (biased variance; mean and variance accumulated in double). Parallel over rows.
void layer_norm_rows(const float* x, const float* w, const float* b, float* out, std::int64_t rows, std::int64_t n,
                     float eps);

}  // namespace evalrun::ops
