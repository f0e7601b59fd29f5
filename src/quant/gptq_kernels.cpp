#include "quant/gptq_kernels.hpp"

#include <immintrin.h>

#include <cstring>

#include "ops/isa.hpp"

// The kernels are written with GCC vector extensions over 16 lanes (one output block) and compiled
// for AVX-512 (one zmm per block), AVX2+FMA (two ymm) and the x86-64 baseline (four xmm), picked per
// call (ops/isa.hpp), so the binary needs no -march flag. The AVX2 matrix-vector product is written in
// intrinsics instead (gemv_rows_avx2): GCC kept the 16-lane version's accumulators on the stack there.

namespace evalrun::quant::gptq_kernels {
namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef std::int32_t v16i __attribute__((vector_size(64)));
typedef std::uint32_t v16u __attribute__((vector_size(64)));
typedef std::uint16_t v16h __attribute__((vector_size(32)));

// The helpers are force-inlined into each clone, so they are compiled for its instruction set and
// never called through the ABI that -Wpsabi warns about (64-byte vectors passed by value).
#define EVALRUN_INLINE inline __attribute__((always_inline))
#pragma GCC diagnostic ignored "-Wpsabi"

EVALRUN_INLINE v16u load_u(const std::uint32_t* p) {
  v16u v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Scales of one (block, group). float16 -> float32 exactly: the half's exponent and mantissa moved
// into a float's fields read as 2^-112 times the value (subnormal halves become float subnormals
// with the same mantissa), so multiplying by 2^112 gives the value; the sign is put back after.
EVALRUN_INLINE v16f load_scales(const Packed& p, std::int64_t b, std::int64_t g) {
  const std::int64_t at = (b * p.groups + g) * kBlock;
  v16f s;
  if (p.s16 != nullptr) {
    v16h h;
    std::memcpy(&h, p.s16 + at, sizeof h);
    const v16u u = __builtin_convertvector(h, v16u);
    const v16u mag = (u & 0x7fffu) << 13;
    v16f f;
    std::memcpy(&f, &mag, sizeof f);
    f = f * 0x1p112f;
    v16u bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= (u & 0x8000u) << 16;
    std::memcpy(&s, &bits, sizeof s);
  } else {
    std::memcpy(&s, p.s32 + at, sizeof s);
  }
  return s;
}

// Zero points of one (block, group) as integers (nibble + zero_offset).
EVALRUN_INLINE v16i load_zeros(const Packed& p, std::int64_t b, std::int64_t g) {
  const std::uint32_t* w = p.z + (b * p.groups + g) * 2;
  const std::uint32_t w0 = w[0], w1 = w[1];
  const v16u words = {w0, w0, w0, w0, w0, w0, w0, w0, w1, w1, w1, w1, w1, w1, w1, w1};
  const v16u shifts = {0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28};
  v16i z = (v16i)((words >> shifts) & 15u);
  return z + p.zero_offset;
}

// q[k] - z of one row of a block's word vector, as float (exact: |q - z| <= 16).
EVALRUN_INLINE v16f row_weights(const v16u& word, int r, const v16i& z) {
  const v16i q = (v16i)((word >> static_cast<unsigned>(4 * r)) & 15u);
  return __builtin_convertvector(q - z, v16f);
}

// q[k] of one row of a block's word vector, as float. kTable: through a 16-entry table (one vpermps
// with AVX-512, which reads only the low 4 bits of each index, so no mask is needed); otherwise mask
// and convert (AVX2 has no 16-lane permutation, GCC would emulate it lane by lane).
template <bool kTable>
EVALRUN_INLINE v16f row_q(const v16u& word, int r) {
  if constexpr (kTable) {
    const v16f iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return __builtin_shuffle(iota, (v16i)(word >> static_cast<unsigned>(4 * r)));
  } else {
    return __builtin_convertvector((v16i)((word >> static_cast<unsigned>(4 * r)) & 15u), v16f);
  }
}

template <int MT, bool kTable>
EVALRUN_INLINE void gemv_rows(const Packed& p, const float* x, std::int64_t ldx, const float* xsum, std::int64_t b,
                              float* y, std::int64_t ldy, float alpha, float beta, const float* bias) {
  // A independent accumulators per row (rows r of a word go to r % A): a multiply-add waits for the
  // previous one into the same register (4 cycles), so one chain per row would leave the FMA units idle.
  constexpr int A = MT >= (kTable ? 8 : 4) ? 1 : (kTable ? 8 : 4) / MT;
  v16f acc[MT];
  for (int t = 0; t < MT; ++t) acc[t] = v16f{};
  const std::uint32_t* qb = p.q + b * p.kwords * kBlock;
  for (std::int64_t g = 0; g < p.groups; ++g) {
    const std::int64_t ks = p.group_start[g], ke = p.group_start[g + 1];
    if (ks == ke) continue;
    v16f gacc[MT][A];
    for (int t = 0; t < MT; ++t) {
      for (int a = 0; a < A; ++a) gacc[t][a] = v16f{};
    }
    std::int64_t k = ks;
    // Rows before the first whole word of the group (only when a group does not start at a multiple
    // of 8, i.e. group sizes that are not multiples of 8).
    for (; k < ke && (k & 7) != 0; ++k) {
      const v16f w = row_q<kTable>(load_u(qb + (k >> 3) * kBlock), static_cast<int>(k & 7));
      for (int t = 0; t < MT; ++t) gacc[t][0] += x[t * ldx + k] * w;
    }
    for (; k + 8 <= ke; k += 8) {
      const v16u word = load_u(qb + (k >> 3) * kBlock);
      for (int r = 0; r < 8; ++r) {
        const v16f w = row_q<kTable>(word, r);
        for (int t = 0; t < MT; ++t) gacc[t][r % A] += x[t * ldx + k + r] * w;
      }
    }
    for (; k < ke; ++k) {
      const v16f w = row_q<kTable>(load_u(qb + (k >> 3) * kBlock), static_cast<int>(k & 7));
      for (int t = 0; t < MT; ++t) gacc[t][0] += x[t * ldx + k] * w;
    }
    const v16f s = load_scales(p, b, g);
    const v16f zf = __builtin_convertvector(load_zeros(p, b, g), v16f);
    for (int t = 0; t < MT; ++t) {
      for (int a = 1; a < A; ++a) gacc[t][0] += gacc[t][a];
      acc[t] += s * (gacc[t][0] - zf * xsum[t * p.groups + g]);
    }
  }
  const std::int64_t c0 = b * kBlock;
  const std::int64_t n = p.out - c0 < kBlock ? p.out - c0 : kBlock;
  for (int t = 0; t < MT; ++t) {
    float r[kBlock];
    std::memcpy(r, &acc[t], sizeof r);
    float* yr = y + t * ldy + c0;
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = bias != nullptr ? r[j] + bias[c0 + j] : r[j];
      yr[j] = beta == 0.0f ? alpha * v : beta * yr[j] + alpha * v;
    }
  }
}

// The AVX2 product: each 16-column block as two 8-lane halves. Per row of a word: shift, mask and
// convert both halves, one broadcast of x per input row, two FMAs; A chains of accumulators per row and
// half keep the FMA latency off the loop while everything stays in the sixteen ymm registers (the
// 16-lane code above, compiled for AVX2, left its accumulators on the stack and read 31% of the
// memory bound at batch 1). Scales: float16 -> float32 with F16C (exact, as load_scales).
#define EVALRUN_AVX2 __attribute__((target("avx2,fma,f16c"))) inline __attribute__((always_inline))

// Columns 8 half .. 8 half + 7 of the word holding row k.
EVALRUN_AVX2 __m256i word_avx2(const std::uint32_t* qb, std::int64_t k, int half) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + (k >> 3) * kBlock + 8 * half));
}

template <int MT, int A>
EVALRUN_AVX2 void add_row_avx2(const __m256i& lo, const __m256i& hi, int r, const float* x, std::int64_t ldx,
                               std::int64_t k, __m256 (&gacc)[MT][A][2], int a) {
  const __m256i mask = _mm256_set1_epi32(15);
  const __m128i shift = _mm_cvtsi32_si128(4 * r);
  const __m256 wlo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(lo, shift), mask));
  const __m256 whi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(hi, shift), mask));
  for (int t = 0; t < MT; ++t) {
    const __m256 xb = _mm256_broadcast_ss(x + t * ldx + k);
    gacc[t][a][0] = _mm256_fmadd_ps(xb, wlo, gacc[t][a][0]);
    gacc[t][a][1] = _mm256_fmadd_ps(xb, whi, gacc[t][a][1]);
  }
}

template <int MT>
EVALRUN_AVX2 void gemv_rows_avx2(const Packed& p, const float* x, std::int64_t ldx, const float* xsum, std::int64_t b,
                                 float* y, std::int64_t ldy, float alpha, float beta, const float* bias) {
  constexpr int A = MT >= 4 ? 1 : 2;
  __m256 acc[MT][2];
  for (int t = 0; t < MT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const std::uint32_t* qb = p.q + b * p.kwords * kBlock;
  const __m256i nibble_shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (std::int64_t g = 0; g < p.groups; ++g) {
    const std::int64_t ks = p.group_start[g], ke = p.group_start[g + 1];
    if (ks == ke) continue;
    __m256 gacc[MT][A][2];
    for (int t = 0; t < MT; ++t) {
      for (int a = 0; a < A; ++a) gacc[t][a][0] = gacc[t][a][1] = _mm256_setzero_ps();
    }
    std::int64_t k = ks;
    // Rows outside whole words (groups whose size is not a multiple of 8).
    for (; k < ke && (k & 7) != 0; ++k) add_row_avx2<MT, A>(word_avx2(qb, k, 0), word_avx2(qb, k, 1), static_cast<int>(k & 7), x, ldx, k, gacc, 0);
    for (; k + 8 <= ke; k += 8) {
      const __m256i lo = word_avx2(qb, k, 0), hi = word_avx2(qb, k, 1);
      for (int r = 0; r < 8; ++r) add_row_avx2<MT, A>(lo, hi, r, x, ldx, k + r, gacc, r % A);
    }
    for (; k < ke; ++k) add_row_avx2<MT, A>(word_avx2(qb, k, 0), word_avx2(qb, k, 1), static_cast<int>(k & 7), x, ldx, k, gacc, 0);
    const std::int64_t at = (b * p.groups + g) * kBlock;
    __m256 s[2], zf[2];
    for (int h = 0; h < 2; ++h) {
      s[h] = p.s16 != nullptr ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.s16 + at + 8 * h)))
                              : _mm256_loadu_ps(p.s32 + at + 8 * h);
      const __m256i zw = _mm256_set1_epi32(static_cast<int>(p.z[(b * p.groups + g) * 2 + h]));
      const __m256i z = _mm256_and_si256(_mm256_srlv_epi32(zw, nibble_shifts), _mm256_set1_epi32(15));
      zf[h] = _mm256_cvtepi32_ps(_mm256_add_epi32(z, _mm256_set1_epi32(p.zero_offset)));
    }
    for (int t = 0; t < MT; ++t) {
      const __m256 xs = _mm256_set1_ps(xsum[t * p.groups + g]);
      for (int h = 0; h < 2; ++h) {
        __m256 sum = gacc[t][0][h];
        for (int a = 1; a < A; ++a) sum = _mm256_add_ps(sum, gacc[t][a][h]);
        acc[t][h] = _mm256_fmadd_ps(s[h], _mm256_fnmadd_ps(zf[h], xs, sum), acc[t][h]);
      }
    }
  }
  const std::int64_t c0 = b * kBlock;
  const std::int64_t n = p.out - c0 < kBlock ? p.out - c0 : kBlock;
  for (int t = 0; t < MT; ++t) {
    float r[kBlock];
    _mm256_storeu_ps(r, acc[t][0]);
    _mm256_storeu_ps(r + 8, acc[t][1]);
    float* yr = y + t * ldy + c0;
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = bias != nullptr ? r[j] + bias[c0 + j] : r[j];
      yr[j] = beta == 0.0f ? alpha * v : beta * yr[j] + alpha * v;
    }
  }
}

template <bool kTable>
EVALRUN_INLINE void gemv_all(const Packed& p, const float* x, std::int64_t M, std::int64_t ldx, const float* xsum,
                             std::int64_t b0, std::int64_t b1, float* y, std::int64_t ldy, float alpha, float beta,
                             const float* bias) {
  for (std::int64_t b = b0; b < b1; ++b) {
    std::int64_t m = 0;
    // Four rows at a time share each decoded weight vector (4 + 4 accumulators stay in registers).
    for (; m + 4 <= M; m += 4) {
      gemv_rows<4, kTable>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
    }
    if (M - m >= 2) {
      gemv_rows<2, kTable>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
      m += 2;
    }
    if (m < M) gemv_rows<1, kTable>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
  }
}

EVALRUN_INLINE void dequantize_body(const Packed& p, std::int64_t k0, std::int64_t k1, std::int64_t b0,
                                    std::int64_t b1, float* dst, std::int64_t ldd) {
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::uint32_t* qb = p.q + b * p.kwords * kBlock;
    for (std::int64_t g = 0; g < p.groups; ++g) {
      const std::int64_t ks = p.group_start[g] > k0 ? p.group_start[g] : k0;
      const std::int64_t ke = p.group_start[g + 1] < k1 ? p.group_start[g + 1] : k1;
      if (ks >= ke) continue;
      const v16i z = load_zeros(p, b, g);
      const v16f s = load_scales(p, b, g);
      std::int64_t k = ks;
      for (; k < ke && ((k & 7) != 0 || k + 8 > ke); ++k) {  // rows outside whole words
        const v16f w = s * row_weights(load_u(qb + (k >> 3) * kBlock), static_cast<int>(k & 7), z);
        std::memcpy(dst + (k - k0) * ldd + b * kBlock, &w, sizeof w);
      }
      for (; k + 8 <= ke; k += 8) {
        const v16u word = load_u(qb + (k >> 3) * kBlock);
        for (int r = 0; r < 8; ++r) {
          const v16f w = s * row_weights(word, r, z);
          std::memcpy(dst + (k + r - k0) * ldd + b * kBlock, &w, sizeof w);
        }
      }
      for (; k < ke; ++k) {
        const v16f w = s * row_weights(load_u(qb + (k >> 3) * kBlock), static_cast<int>(k & 7), z);
        std::memcpy(dst + (k - k0) * ldd + b * kBlock, &w, sizeof w);
      }
    }
  }
}


// The three compilations of each kernel. The 4-bit table lookup needs AVX-512's 16-lane permutation;
// AVX2 and the baseline mask and convert instead (GCC would emulate the permutation lane by lane).
#define EVALRUN_GEMV_ARGS                                                                                          \
  const Packed &p, const float *x, std::int64_t M, std::int64_t ldx, const float *xsum, std::int64_t b0,         \
      std::int64_t b1, float *y, std::int64_t ldy, float alpha, float beta, const float *bias
EVALRUN_TARGET_V4 void gemv_v4(EVALRUN_GEMV_ARGS) { gemv_all<true>(p, x, M, ldx, xsum, b0, b1, y, ldy, alpha, beta, bias); }
EVALRUN_TARGET_V3 void gemv_v3(EVALRUN_GEMV_ARGS) {
  for (std::int64_t b = b0; b < b1; ++b) {
    std::int64_t m = 0;
    for (; m + 4 <= M; m += 4) gemv_rows_avx2<4>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
    if (M - m >= 2) {
      gemv_rows_avx2<2>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
      m += 2;
    }
    if (m < M) gemv_rows_avx2<1>(p, x + m * ldx, ldx, xsum + m * p.groups, b, y + m * ldy, ldy, alpha, beta, bias);
  }
}
void gemv_base(EVALRUN_GEMV_ARGS) { gemv_all<false>(p, x, M, ldx, xsum, b0, b1, y, ldy, alpha, beta, bias); }

#define EVALRUN_DEQ_ARGS \
  const Packed &p, std::int64_t k0, std::int64_t k1, std::int64_t b0, std::int64_t b1, float *dst, std::int64_t ldd
EVALRUN_TARGET_V4 void dequantize_v4(EVALRUN_DEQ_ARGS) { dequantize_body(p, k0, k1, b0, b1, dst, ldd); }
EVALRUN_TARGET_V3 void dequantize_v3(EVALRUN_DEQ_ARGS) { dequantize_body(p, k0, k1, b0, b1, dst, ldd); }
void dequantize_base(EVALRUN_DEQ_ARGS) { dequantize_body(p, k0, k1, b0, b1, dst, ldd); }

}  // namespace

void gemv_blocks(const Packed& p, const float* x, std::int64_t M, std::int64_t ldx, const float* xsum, std::int64_t b0,
                 std::int64_t b1, float* y, std::int64_t ldy, float alpha, float beta, const float* bias) {
  switch (ops::kernel_isa()) {
    case ops::Isa::avx512: return gemv_v4(p, x, M, ldx, xsum, b0, b1, y, ldy, alpha, beta, bias);
    case ops::Isa::avx2: return gemv_v3(p, x, M, ldx, xsum, b0, b1, y, ldy, alpha, beta, bias);
    case ops::Isa::baseline: return gemv_base(p, x, M, ldx, xsum, b0, b1, y, ldy, alpha, beta, bias);
  }
}

void dequantize_blocks(const Packed& p, std::int64_t k0, std::int64_t k1, std::int64_t b0, std::int64_t b1, float* dst,
                       std::int64_t ldd) {
  switch (ops::kernel_isa()) {
    case ops::Isa::avx512: return dequantize_v4(p, k0, k1, b0, b1, dst, ldd);
    case ops::Isa::avx2: return dequantize_v3(p, k0, k1, b0, b1, dst, ldd);
    case ops::Isa::baseline: return dequantize_base(p, k0, k1, b0, b1, dst, ldd);
  }
}

}  // namespace evalrun::quant::gptq_kernels
