// bfloat16 values as raw 16-bit patterns, and the rounding a bfloat16 model applies after each
// operation. The raw-buffer bfloat16 path keeps its activations in float32 buffers that hold bfloat16
// values: each operation computes in float32, as torch's CPU kernels do for bfloat16 tensors, and
// rounds its result with round_to_bf16 where torch would store a bfloat16 tensor.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace evalrun::ops {

// bfloat16 -> float32 (exact).
inline float float_of_bf16(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// float32 -> bfloat16, round to nearest, ties to even (torch's conversion); NaN stays NaN.
inline std::uint16_t bf16_of(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// x rounded to the nearest bfloat16, as a float32.
inline float round_to_bf16(float x) { return float_of_bf16(bf16_of(x)); }

// The same in place over n values (bfloat16.cpp: 16 or 8 values at a time with AVX-512 or AVX2).
void round_to_bf16(float* x, std::int64_t n);

// x[i] = round_to_bf16(round_to_bf16(x[i]) / divisor) for i < n, or with divisor 0 the rounded value
// times multiplier, rounded: the scaled attention scores of a bfloat16 model (q . k rounded, then HF's
// `/ sqrt(head_dim)` or a folded scale, rounded again). The division is IEEE's in every version.
void round_scaled_to_bf16(float* x, std::int64_t n, float divisor, float multiplier);

// bf16_of over 16 lanes (each lane's 16-bit result, packed): the same integer rounding, not
// vcvtneps2bf16, which flushes denormal inputs to zero. For AVX-512 kernels.
__attribute__((target("avx512f"))) inline __m256i bf16_of_lanes(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0)));
}

}  // namespace evalrun::ops
