// The array forms of ops/bfloat16.hpp's rounding, vectorized: a bfloat16 model's raw-buffer path
// rounds every activation, and an encoder's attention rounds each of its ~170 M scores twice per
// forward pass, which the scalar loop (this directory compiles for the x86-64 baseline) did at a few
// cycles a value. The same integer rounding as bf16_of (ties to even, NaN -> 0x7fc0) in every lane.
#include "ops/bfloat16.hpp"

#include "ops/isa.hpp"

namespace evalrun::ops {
namespace {

__attribute__((target("avx512f"))) inline __m512 round_lanes(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  // + 0x7fff, and 1 more where the kept part is odd (a masked add: GCC 12 warns falsely about the
  // shift intrinsics' pass-through operand here).
  __m512i r = _mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff));
  r = _mm512_mask_add_epi32(r, _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x10000)), r, _mm512_set1_epi32(1));
  r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc00000)));
}

__attribute__((target("avx2"))) inline __m256 round_lanes(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd),
                                     _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  // |x| > infinity as integers: both sides are non-negative, so the signed compare is right.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc00000), nan));
}

// Without `scaled`: round(x). With it: round(round(x) / divisor), or round(round(x) * multiplier)
// when divisor is 0.
__attribute__((target("avx512f"))) void round_avx512(float* x, std::int64_t n, bool scaled, float divisor,
                                                     float multiplier) {
  const __m512 d = _mm512_set1_ps(divisor), m = _mm512_set1_ps(multiplier);
  for (std::int64_t i = 0; i < n; i += 16) {
    const auto lanes = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 r = round_lanes(_mm512_maskz_loadu_ps(lanes, x + i));
    if (scaled) r = round_lanes(divisor != 0.0f ? _mm512_div_ps(r, d) : _mm512_mul_ps(r, m));
    _mm512_mask_storeu_ps(x + i, lanes, r);
  }
}

float round_scalar(float x, bool scaled, float divisor, float multiplier) {
  const float r = round_to_bf16(x);
  return scaled ? round_to_bf16(divisor != 0.0f ? r / divisor : r * multiplier) : r;
}

__attribute__((target("avx2"))) void round_avx2(float* x, std::int64_t n, bool scaled, float divisor,
                                                float multiplier) {
  const __m256 d = _mm256_set1_ps(divisor), m = _mm256_set1_ps(multiplier);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = round_lanes(_mm256_loadu_ps(x + i));
    if (scaled) r = round_lanes(divisor != 0.0f ? _mm256_div_ps(r, d) : _mm256_mul_ps(r, m));
    _mm256_storeu_ps(x + i, r);
  }
  for (; i < n; ++i) x[i] = round_scalar(x[i], scaled, divisor, multiplier);
}

void round_any(float* x, std::int64_t n, bool scaled, float divisor, float multiplier) {
  switch (kernel_isa()) {
    case Isa::avx512: return round_avx512(x, n, scaled, divisor, multiplier);
    case Isa::avx2: return round_avx2(x, n, scaled, divisor, multiplier);
    case Isa::baseline: break;
  }
  for (std::int64_t i = 0; i < n; ++i) x[i] = round_scalar(x[i], scaled, divisor, multiplier);
}

}  // namespace

void round_to_bf16(float* x, std::int64_t n) { round_any(x, n, false, 0.0f, 1.0f); }

void round_scaled_to_bf16(float* x, std::int64_t n, float divisor, float multiplier) {
  round_any(x, n, true, divisor, multiplier);
}

}  // namespace evalrun::ops
