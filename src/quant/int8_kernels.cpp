// AVX-512 and scalar row kernels of Int8Linear (see int8_kernels.hpp). Compiled without the torch
// precompiled header and with -Wno-(maybe-)uninitialized: GCC 12's AVX-512 intrinsics start from
// _mm512_undefined_*() values that it reports as uninitialized once inlined (GCC bug 105593).
#include "quant/int8_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace evalrun::quant::kernels {

namespace {

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return yes;
}

// max_ps / min_ps semantics (NaN -> the bound) so that the scalar and vector versions agree.
inline float clamp_to(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

// max_k |x_k * inv_s_k| (inv_s may be null).
float row_absmax_scalar(const float* x, const float* inv_s, std::int64_t k0, std::int64_t K, float m) {
  for (std::int64_t k = k0; k < K; ++k) {
    const float v = inv_s != nullptr ? x[k] * inv_s[k] : x[k];
    m = std::max(m, std::fabs(v));
  }
  return m;
}

// q_k = round(clamp(x_k * inv_s_k * mult, lo, hi)) + offset, stored as 8 bits (int8 or uint8).
template <typename Q>
void quantize_row_scalar(const float* x, const float* inv_s, std::int64_t k0, std::int64_t K, float mult, float lo,
                         float hi, std::int32_t offset, Q* q) {
  for (std::int64_t k = k0; k < K; ++k) {
    float v = inv_s != nullptr ? x[k] * inv_s[k] : x[k];
    v = clamp_to(v * mult, lo, hi);
    q[k] = static_cast<Q>(static_cast<std::int32_t>(std::nearbyint(v)) + offset);
  }
}

// y_n = [y_n +] alpha * (acc_n * row_scale * w_scale_n + b_n)
void dequant_row_scalar(const std::int32_t* acc, std::int64_t n0, std::int64_t N, float rs, const float* ws,
                        const float* b, float alpha, bool accumulate, float* y) {
  for (std::int64_t n = n0; n < N; ++n) {
    float v = static_cast<float>(acc[n]) * rs;
    v = v * ws[n];
    if (b != nullptr) v = v + b[n];
    if (alpha != 1.0f) v = v * alpha;
    y[n] = accumulate ? y[n] + v : v;
  }
}

__attribute__((target("avx512f,avx512bw"))) float row_absmax_avx512(const float* x, const float* inv_s,
                                                                    std::int64_t K) {
  __m512 m = _mm512_setzero_ps();
  std::int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    if (inv_s != nullptr) v = _mm512_mul_ps(v, _mm512_loadu_ps(inv_s + k));
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
  }
  return row_absmax_scalar(x, inv_s, k, K, _mm512_reduce_max_ps(m));
}

template <typename Q>
__attribute__((target("avx512f,avx512bw"))) void quantize_row_avx512(const float* x, const float* inv_s,
                                                                      std::int64_t K, float mult, float lo, float hi,
                                                                      std::int32_t offset, Q* q) {
  const __m512 vm = _mm512_set1_ps(mult), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  const __m512i voff = _mm512_set1_epi32(offset);
  std::int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    if (inv_s != nullptr) v = _mm512_mul_ps(v, _mm512_loadu_ps(inv_s + k));
    v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, vm), vlo), vhi);
    // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does.
    const __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(v), voff);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(i));
  }
  quantize_row_scalar(x, inv_s, k, K, mult, lo, hi, offset, q);
}

__attribute__((target("avx512f,avx512bw"))) void dequant_row_avx512(const std::int32_t* acc, std::int64_t N, float rs,
                                                                    const float* ws, const float* b, float alpha,
                                                                    bool accumulate, float* y) {
  const __m512 vrs = _mm512_set1_ps(rs), valpha = _mm512_set1_ps(alpha);
  std::int64_t n = 0;
  for (; n + 16 <= N; n += 16) {
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(acc + n)), vrs);
    v = _mm512_mul_ps(v, _mm512_loadu_ps(ws + n));
    if (b != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(b + n));
    if (alpha != 1.0f) v = _mm512_mul_ps(v, valpha);
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(y + n), v);
    _mm512_storeu_ps(y + n, v);
  }
  dequant_row_scalar(acc, n, N, rs, ws, b, alpha, accumulate, y);
}


template <typename Q>
void quantize_row_any(const float* x, const float* inv_s, std::int64_t K, float mult, float lo, float hi,
                      std::int32_t offset, Q* q) {
  if (have_avx512()) {
    quantize_row_avx512(x, inv_s, K, mult, lo, hi, offset, q);
  } else {
    quantize_row_scalar(x, inv_s, 0, K, mult, lo, hi, offset, q);
  }
}

}  // namespace

void quantize_row(const float* x, const float* inv_s, std::int64_t K, float mult, float lo, float hi,
                  std::int32_t offset, std::int8_t* q) {
  quantize_row_any(x, inv_s, K, mult, lo, hi, offset, q);
}

void quantize_row(const float* x, const float* inv_s, std::int64_t K, float mult, float lo, float hi,
                  std::int32_t offset, std::uint8_t* q) {
  quantize_row_any(x, inv_s, K, mult, lo, hi, offset, q);
}

float row_absmax(const float* x, const float* inv_s, std::int64_t K) {
  return have_avx512() ? row_absmax_avx512(x, inv_s, K) : row_absmax_scalar(x, inv_s, 0, K, 0.0f);
}

void dequant_row(const std::int32_t* acc, std::int64_t N, float rs, const float* ws, const float* b, float alpha,
                 bool accumulate, float* y) {
  if (have_avx512()) {
    dequant_row_avx512(acc, N, rs, ws, b, alpha, accumulate, y);
  } else {
    dequant_row_scalar(acc, 0, N, rs, ws, b, alpha, accumulate, y);
  }
}

}  // namespace evalrun::quant::kernels
