#include "ops/fp8_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "ops/isa.hpp"
#include "ops/row_dot_avx2.hpp"

namespace evalrun::ops {
namespace {

#define EVALRUN_FP8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

// 32 e4m3 codes -> 32 fp16 patterns worth code / 2^8, exactly. Sign-extending each byte to 16 bits
// and shifting left by 7 puts the code's exponent and mantissa in bits 13..7 and its sign in bits 15
// and 14; clearing bit 14 leaves an fp16 whose exponent field is the code's (bias 15 instead of 7)
// and whose mantissa is the code's 3 bits on top: normal codes come out 2^-8 times their value, and
// so do subnormal ones (e = 0: m 2^-17 in fp16 subnormals against m 2^-9).
EVALRUN_FP8_TARGET inline __m512i e4m3_as_half(__m256i codes) {
  return _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(codes), 7), _mm512_set1_epi16(static_cast<short>(0xBF80)));
}

// 64 codes (lo: the first 32, hi: the next) -> four vectors of 16 floats, each 2^-8 times its value.
EVALRUN_FP8_TARGET inline void decode(__m256i lo, __m256i hi, __m512 (&wv)[4]) {
  const __m512i a = e4m3_as_half(lo), b = e4m3_as_half(hi);
  wv[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(a));
  wv[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(a, 1));
  wv[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(b));
  wv[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(b, 1));
}

// Output columns j0 .. j1 of M rows: 64 weights per step of p in four accumulators per row (the order
// of a row's sum is the same whatever M is); the tail with masked loads (code 0 decodes to 0).
template <int M>
EVALRUN_FP8_TARGET void columns_avx512(const float* x, std::int64_t ldx, const std::uint8_t* w, const float* scale,
                                std::int64_t scale_stride, std::int64_t k, std::int64_t j0, std::int64_t j1, float* y,
                                std::int64_t ldy, float alpha, float beta) {
  const std::int64_t full = k / 64 * 64;
  const std::int64_t left = k - full;
  const std::int64_t left_lo = std::min<std::int64_t>(left, 32), left_hi = std::max<std::int64_t>(left - 32, 0);
  const __mmask32 bytes_lo = left_lo == 32 ? ~0u : (1u << left_lo) - 1u;
  const __mmask32 bytes_hi = (1u << left_hi) - 1u;  // left_hi < 32
  __mmask16 tail[4];
  for (int t = 0; t < 4; ++t) {
    const std::int64_t n = std::clamp<std::int64_t>(left - 16 * t, 0, 16);
    tail[t] = static_cast<__mmask16>((1u << n) - 1u);
  }
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::uint8_t* wr = w + j * k;
    __m512 acc[M][4];
    for (int r = 0; r < M; ++r) {
      for (int t = 0; t < 4; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    __m512 wv[4];
    for (std::int64_t p = 0; p < full; p += 64) {
      decode(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + p)),
             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + p + 32)), wv);
      for (int t = 0; t < 4; ++t) {
        for (int r = 0; r < M; ++r) acc[r][t] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + p + 16 * t), wv[t], acc[r][t]);
      }
    }
    if (left > 0) {
      decode(_mm256_maskz_loadu_epi8(bytes_lo, wr + full), _mm256_maskz_loadu_epi8(bytes_hi, wr + full + 32), wv);
      for (int t = 0; t < 4; ++t) {
        for (int r = 0; r < M; ++r) {
          acc[r][t] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail[t], x + r * ldx + full + 16 * t), wv[t], acc[r][t]);
        }
      }
    }
    const float s = alpha * scale[j * scale_stride];
    for (int r = 0; r < M; ++r) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      const float v = s * (_mm512_reduce_add_ps(sum) * 256.0f);  // 256: the decode's 2^-8 taken back (exact)
      float& out = y[r * ldy + j];
      out = beta != 0.0f ? out + v : v;
    }
  }
}

// The AVX2 version (x86-64-v3 CPUs without AVX-512; see ops/row_dot_avx2.hpp): the same decode, 8
// codes at a time (sign-extended to 16 bits, shifted, bit 14 cleared, vcvtph2ps). AVX2 has no masked
// byte load, so the partial step's codes are copied into a zeroed block (code 0 decodes to 0).
EVALRUN_AVX2_ROWS_TARGET inline __m256 decode8_avx2(const std::uint8_t* codes) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(c), 7), _mm_set1_epi16(static_cast<short>(0xBF80))));
}

struct Fp8Loader {
  const std::uint8_t* row;
  avx2_rows::LastStep<std::uint8_t> last;
  Fp8Loader(const std::uint8_t* r, const avx2_rows::Tail& end, std::int64_t k) : row(r), last(r, end, k) {}
  EVALRUN_AVX2_ROWS_TARGET __m256 at(std::int64_t p) const { return decode8_avx2(row + p); }
  EVALRUN_AVX2_ROWS_TARGET __m256 tail(int t) const { return decode8_avx2(last.codes + 8 * t); }
};

template <int M>
EVALRUN_AVX2_ROWS_TARGET void columns_avx2(const float* x, std::int64_t ldx, const std::uint8_t* w, const float* scale,
                                           std::int64_t scale_stride, std::int64_t k, std::int64_t j0, std::int64_t j1,
                                           float* y, std::int64_t ldy, float alpha, float beta) {
  const avx2_rows::Tail tail(k);
  for (std::int64_t j = j0; j < j1; ++j) {
    float sums[M];
    avx2_rows::dot_rows<M>(x, ldx, Fp8Loader(w + j * k, tail, k), tail, sums);
    const float s = alpha * scale[j * scale_stride];
    for (int r = 0; r < M; ++r) {
      const float v = s * (sums[r] * 256.0f);  // 256: the decode's 2^-8 taken back (exact)
      float& out = y[r * ldy + j];
      out = beta != 0.0f ? out + v : v;
    }
  }
}

using Columns = void (*)(const float*, std::int64_t, const std::uint8_t*, const float*, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, float*, std::int64_t, float, float);
// Rows one call of a columns function takes (kFp8RowsMax rows run in groups of these).
constexpr std::int64_t kGroupRows = 4;
constexpr Columns kColumnsAvx512[kGroupRows] = {columns_avx512<1>, columns_avx512<2>, columns_avx512<3>,
                                                columns_avx512<4>};
constexpr Columns kColumnsAvx2[kGroupRows] = {columns_avx2<1>, columns_avx2<2>, columns_avx2<3>, columns_avx2<4>};

std::atomic<std::int64_t> g_limit{kFp8RowsMax};

}  // namespace

void set_fp8_rows_limit(std::int64_t rows) { g_limit = std::clamp<std::int64_t>(rows, 0, kFp8RowsMax); }
std::int64_t fp8_rows_limit() { return g_limit.load(); }

bool have_fp8_rows_kernel() { return kernel_isa() != Isa::baseline; }

void linear_fp8_rows(const float* x, std::int64_t m, std::int64_t ldx, const std::uint8_t* w, const float* scale,
                     std::int64_t scale_stride, std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, float alpha,
                     float beta) {
  if (m < 1 || m > kFp8RowsMax) throw std::invalid_argument("linear_fp8_rows: 1 to 8 rows");
  const Isa isa = kernel_isa();
  if (isa == Isa::baseline) throw std::logic_error("linear_fp8_rows: this CPU has neither AVX-512 nor AVX2");
  const Columns* columns = isa == Isa::avx512 ? kColumnsAvx512 : kColumnsAvx2;
  // Blocks of 32 columns, each thread streaming its own run of them; a task is at least 64K weights
  // (as the float32 kernel's), so a tiny model's products stay on one thread. Every group of up to 4
  // rows passes over a block before the next block, so the second group finds it in cache (32 rows
  // of k codes: 24 KB at k = 768). A row's sums are the same whatever group it is in.
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (32 * k));
  at::parallel_for(0, (n + 31) / 32, grain, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      for (std::int64_t r0 = 0; r0 < m; r0 += kGroupRows) {
        const std::int64_t rows = std::min(kGroupRows, m - r0);
        columns[rows - 1](x + r0 * ldx, ldx, w, scale, scale_stride, k, b * 32, std::min(n, (b + 1) * 32),
                           y + r0 * ldy, ldy, alpha, beta);
      }
    }
  });
}

}  // namespace evalrun::ops
