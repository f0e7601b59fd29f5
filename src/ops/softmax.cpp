// The row softmax of every attention path. With AVX-512 the exponentials run 16 at a time (Cephes'
// expf polynomial, within 1-2 ulp of libm's expf): in an encoder at sequence length 384 the softmax
// is ~170 M exponentials per forward pass, which libm's scalar expf made a fifth of an INT8 forward.
// Other CPUs take the scalar loop. The lanes' partial sums make the AVX-512 result differ from the
// scalar one in float rounding only; each row is computed alone, so neither depends on the batch.
#include "ops/softmax.hpp"

#include "ops/bfloat16.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace evalrun::ops {
namespace {

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

void softmax_row_scalar(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
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

// exp(x) for x <= 0 (the argument of a softmax after its maximum is subtracted): x = k ln2 + r with
// |r| <= ln2 / 2, exp(r) by Cephes' degree-7 expf polynomial, times 2^k. Arguments below -104 give 0
// (exp underflows there anyway), which also keeps -inf from becoming NaN.
__attribute__((target("avx512f"))) inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);  // ln2 in two parts: r exact
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, k);
}

// Lanes j0 .. j0+15 that lie in [first, last] with key_mask != 0.
__attribute__((target("avx512f"))) inline __mmask16 allowed_lanes(const std::int64_t* key_mask, std::int64_t j0,
                                                                   std::int64_t first, std::int64_t last) {
  const std::int64_t lo = std::max<std::int64_t>(first - j0, 0), hi = std::min<std::int64_t>(last - j0 + 1, 16);
  if (hi <= lo) return 0;
  const __mmask16 range = static_cast<__mmask16>(((1u << (hi - lo)) - 1u) << lo);
  const __mmask8 m0 = _mm512_mask_test_epi64_mask(static_cast<__mmask8>(range),
                                                   _mm512_maskz_loadu_epi64(static_cast<__mmask8>(range), key_mask + j0),
                                                   _mm512_set1_epi64(-1));
  const __mmask8 hi8 = static_cast<__mmask8>(range >> 8);
  const __mmask8 m1 = _mm512_mask_test_epi64_mask(hi8, _mm512_maskz_loadu_epi64(hi8, key_mask + j0 + 8),
                                                   _mm512_set1_epi64(-1));
  return static_cast<__mmask16>(m0 | (static_cast<unsigned>(m1) << 8));
}

// Three passes over the row: the allowed lanes (kept per 16 keys for the next pass) and the maximum;
// the exponentials and their sum; the scaling by 1 / sum (a multiply: a division per vector cost
// as much as the exponential), stored as float32 into s or, with p16, rounded to bfloat16 there.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void softmax_row_avx512(float* s, std::int64_t n,
                                                                             const std::int64_t* key_mask,
                                                                             std::int64_t first, std::int64_t last,
                                                                             std::uint16_t* p16) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const std::int64_t chunks = (n + 15) / 16;
  thread_local std::vector<__mmask16> lanes;
  if (lanes.size() < static_cast<std::size_t>(chunks)) lanes.resize(static_cast<std::size_t>(chunks));
  __m512 vmax = _mm512_set1_ps(neg_inf);
  for (std::int64_t c = 0; c < chunks; ++c) {
    const __mmask16 a = allowed_lanes(key_mask, c * 16, first, last);
    lanes[static_cast<std::size_t>(c)] = a;
    vmax = _mm512_mask_max_ps(vmax, a, vmax, _mm512_maskz_loadu_ps(a, s + c * 16));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  if (mx == neg_inf) {
    std::fill(s, s + n, 0.0f);
    if (p16 != nullptr) std::fill(p16, p16 + n, std::uint16_t{0});
    return;
  }
  auto in_row = [n](std::int64_t j) {
    return n - j >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1u);
  };
  const __m512 m = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < chunks; ++c) {
    const __mmask16 a = lanes[static_cast<std::size_t>(c)];
    const __m512 e = _mm512_maskz_mov_ps(a, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(a, s + c * 16), m)));
    vsum = _mm512_add_ps(vsum, e);
    _mm512_mask_storeu_ps(s + c * 16, in_row(c * 16), e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (std::int64_t j = 0; j < n; j += 16) {
    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(in_row(j), s + j), inv);
    if (p16 != nullptr) {
      _mm256_mask_storeu_epi16(p16 + j, in_row(j), bf16_of_lanes(p));
    } else {
      _mm512_mask_storeu_ps(s + j, in_row(j), p);
    }
  }
}

}  // namespace

void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t last) {
  causal_masked_softmax_row(s, n, key_mask, 0, last);
}

void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
                               std::int64_t last) {
  if (have_avx512()) {
    softmax_row_avx512(s, n, key_mask, first, last, nullptr);
  } else {
    softmax_row_scalar(s, n, key_mask, first, last);
  }
}

void causal_masked_softmax_row_bf16(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
                                    std::int64_t last, std::uint16_t* p16) {
  if (have_avx512()) {
    softmax_row_avx512(s, n, key_mask, first, last, p16);
  } else {
    softmax_row_scalar(s, n, key_mask, first, last);
    for (std::int64_t j = 0; j < n; ++j) p16[j] = bf16_of(s[j]);
  }
}

}  // namespace evalrun::ops
