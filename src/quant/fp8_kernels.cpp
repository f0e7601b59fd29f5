#include "quant/fp8_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/isa.hpp"

#define EVALRUN_INLINE inline __attribute__((always_inline))

namespace evalrun::quant::fp8_kernels {
namespace {

// Written as plain loops over scalars (bit casts, comparisons as selects, no branches) that GCC's
// vectorizer turns into code of each target's width (this file is compiled with -fno-trapping-math,
// which lets it evaluate both sides of a select).

// e4m3 code -> float. Exponent field e >= 1: the code's exponent and mantissa moved into a float's
// fields with the bias raised by 120 ((1 + m/8) 2^(e-7)); e = 0: m 2^-9 (converted, so no float
// subnormal is involved). Then the sign.
EVALRUN_INLINE float decode(std::uint32_t code) {
  const std::uint32_t em = code & 0x7Fu;
  const float normal = std::bit_cast<float>((em << 20) + (120u << 23));
  const float sub = static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-9f;
  const float mag = em < 8u ? sub : normal;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | ((code & 0x80u) << 24));
}

// round_to_e4m3 without branches (see fp8.cpp for the cases).
EVALRUN_INLINE float round_e4m3(float v) {
  const std::uint32_t vb = std::bit_cast<std::uint32_t>(v);
  const float a = std::bit_cast<float>(vb & 0x7FFFFFFFu);
  std::uint32_t u = vb & 0x7FFFFFFFu;
  u = (u + 0x7FFFFu + ((u >> 20) & 1u)) & 0xFFF00000u;  // 3 mantissa bits, ties to even
  float r = std::bit_cast<float>(u);
  r = r > 448.0f ? 448.0f : r;  // NaN stays NaN (the comparison is false)
  r = a >= 448.0f ? 448.0f : r;
  const float s = ((a * 512.0f + 0x1p23f) - 0x1p23f) * 0x1p-9f;  // subnormal range, ties to even
  r = a < 0x1p-6f ? s : r;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(r) | (vb & 0x80000000u));
}

EVALRUN_INLINE void dequantize_body(const std::uint8_t* w, std::int64_t rows, std::int64_t in, const float* scale,
                                    std::int64_t scale_stride, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float s = scale[r * scale_stride];
    const std::uint8_t* wr = w + r * in;
    float* d = dst + r * in;
    for (std::int64_t k = 0; k < in; ++k) d[k] = decode(wr[k]) * s;
  }
}

EVALRUN_INLINE void round_body(const float* x, std::int64_t rows, std::int64_t in, std::int64_t ldx, float scale,
                               float* dst) {
  for (std::int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * ldx;
    float* d = dst + m * in;
    float s = scale;
    if (s == 0.0f) {
      // max |x| on the bit patterns (ordered as the values for non-negative floats; NaN wins)
      std::uint32_t amax = 0;
      for (std::int64_t k = 0; k < in; ++k) amax = std::max(amax, std::bit_cast<std::uint32_t>(xr[k]) & 0x7FFFFFFFu);
      s = std::bit_cast<float>(amax) / 448.0f;
    }
    if (!(s > 0.0f)) {  // a row of zeros (dynamic) stays as it is
      std::memcpy(d, xr, sizeof(float) * in);
      continue;
    }
    for (std::int64_t k = 0; k < in; ++k) d[k] = round_e4m3(xr[k] / s) * s;
  }
}

#define EVALRUN_DEQ_ARGS \
  const std::uint8_t *w, std::int64_t rows, std::int64_t in, const float *scale, std::int64_t scale_stride, float *dst
EVALRUN_TARGET_V4 void dequantize_v4(EVALRUN_DEQ_ARGS) { dequantize_body(w, rows, in, scale, scale_stride, dst); }
EVALRUN_TARGET_V3 void dequantize_v3(EVALRUN_DEQ_ARGS) { dequantize_body(w, rows, in, scale, scale_stride, dst); }
void dequantize_base(EVALRUN_DEQ_ARGS) { dequantize_body(w, rows, in, scale, scale_stride, dst); }

#define EVALRUN_ROUND_ARGS \
  const float *x, std::int64_t rows, std::int64_t in, std::int64_t ldx, float scale, float *dst
EVALRUN_TARGET_V4 void round_v4(EVALRUN_ROUND_ARGS) { round_body(x, rows, in, ldx, scale, dst); }
EVALRUN_TARGET_V3 void round_v3(EVALRUN_ROUND_ARGS) { round_body(x, rows, in, ldx, scale, dst); }
void round_base(EVALRUN_ROUND_ARGS) { round_body(x, rows, in, ldx, scale, dst); }

}  // namespace

void dequantize_rows(const std::uint8_t* w, std::int64_t rows, std::int64_t in, const float* scale,
                     std::int64_t scale_stride, float* dst) {
  switch (ops::kernel_isa()) {
    case ops::Isa::avx512: return dequantize_v4(w, rows, in, scale, scale_stride, dst);
    case ops::Isa::avx2: return dequantize_v3(w, rows, in, scale, scale_stride, dst);
    case ops::Isa::baseline: return dequantize_base(w, rows, in, scale, scale_stride, dst);
  }
}

void round_rows(const float* x, std::int64_t rows, std::int64_t in, std::int64_t ldx, float scale, float* dst) {
  switch (ops::kernel_isa()) {
    case ops::Isa::avx512: return round_v4(x, rows, in, ldx, scale, dst);
    case ops::Isa::avx2: return round_v3(x, rows, in, ldx, scale, dst);
    case ops::Isa::baseline: return round_base(x, rows, in, ldx, scale, dst);
  }
}

}  // namespace evalrun::quant::fp8_kernels
