// Row-wise normalisations on raw float32 buffers (the float32 fast path of the models).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// out[r] = (w + weight_offset) * (x[r] * rsqrt(mean(x[r]^2) + eps)) for `rows` rows of n, as
// LlamaRMSNorm (weight_offset 0) and GemmaRMSNorm (weight_offset 1: the stored weights are offsets
// from 1) compute it in float32 (sum of squares accumulated in double). Parallel over rows.
// bf16: round as a bfloat16 model does (ops/bfloat16.hpp): LlamaRMSNorm casts the normalized row to
// bfloat16 before scaling it by w (a second rounding), GemmaRMSNorm scales in float32 and casts once.
void rms_norm_rows(const float* x, const float* w, float* out, std::int64_t rows, std::int64_t n, float eps,
                   float weight_offset, bool bf16 = false);

// out[r] = (x[r] - mean) * rsqrt(var + eps) * w + b for `rows` rows of n, as torch's LayerNorm
// (biased variance; mean and variance accumulated in double). Parallel over rows. bf16: the result
// rounded to bfloat16 once (a bfloat16 model's LayerNorm, computed in float32).
void layer_norm_rows(const float* x, const float* w, const float* b, float* out, std::int64_t rows, std::int64_t n,
                     float eps, bool bf16 = false);

// A bfloat16 encoder's post-LayerNorm step on bfloat16 rows (raw 16-bit patterns): out[r] =
// LayerNorm(round(x[r] + residual[r])) rounded to bfloat16, computed in float32 as above (torch rounds
// the residual sum, a bfloat16 tensor, before its float32 LayerNorm). residual may be null (x alone).
// In place is allowed (out == x or out == residual). Parallel over rows; no allocation.
void layer_norm_rows_bf16(const std::uint16_t* x, const std::uint16_t* residual, const float* w, const float* b,
                          std::uint16_t* out, std::int64_t rows, std::int64_t n, float eps);

}  // namespace evalrun::ops
