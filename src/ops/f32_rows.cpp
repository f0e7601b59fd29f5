#include "ops/f32_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "ops/isa.hpp"

namespace evalrun::ops {
namespace {

// Output columns j0 .. j1 of M rows (M a template argument: the accumulators stay in registers). Four
// accumulators per row, 64 floats per step of p, whatever M is, so a row sums in the same order alone
// or beside others (four independent chains keep the FMA latency off the weight stream: two read
// ~15% slower at one row); the tail with masked loads (zeros add nothing).
template <int M>
__attribute__((target("avx512f"))) void columns_avx512(const float* x, std::int64_t ldx, const float* w, std::int64_t k,
                                                std::int64_t j0, std::int64_t j1, float* y, std::int64_t ldy,
                                                float alpha, float beta) {
  constexpr int kAcc = 4;
  const std::int64_t full = k / (16 * kAcc) * (16 * kAcc);
  __mmask16 tail[kAcc];
  for (int t = 0; t < kAcc; ++t) {
    const std::int64_t left = std::clamp<std::int64_t>(k - full - 16 * t, 0, 16);
    tail[t] = static_cast<__mmask16>((1u << left) - 1u);
  }
  for (std::int64_t j = j0; j < j1; ++j) {
    const float* wr = w + j * k;
    __m512 acc[M][kAcc];
    for (int r = 0; r < M; ++r) {
      for (int t = 0; t < kAcc; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    for (std::int64_t p = 0; p < full; p += 16 * kAcc) {
      for (int t = 0; t < kAcc; ++t) {
        const __m512 wv = _mm512_loadu_ps(wr + p + 16 * t);
        for (int r = 0; r < M; ++r) acc[r][t] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + p + 16 * t), wv, acc[r][t]);
      }
    }
    if (full < k) {
      for (int t = 0; t < kAcc; ++t) {
        const __m512 wv = _mm512_maskz_loadu_ps(tail[t], wr + full + 16 * t);
        for (int r = 0; r < M; ++r) {
          acc[r][t] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail[t], x + r * ldx + full + 16 * t), wv, acc[r][t]);
        }
      }
    }
    for (int r = 0; r < M; ++r) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      const float v = alpha * _mm512_reduce_add_ps(sum);
      float& out = y[r * ldy + j];
      out = beta != 0.0f ? out + v : v;
    }
  }
}

// The AVX2 + FMA version (x86-64-v3 CPUs without AVX-512: AMD Zen 1-3, Intel's client cores). Eight
// floats a vector and sixteen registers: four accumulators per row again (a step of 32 floats), so at
// most three rows fit beside the weight vector and the input; four rows take two passes of two over
// each weight row, the second reading it from L1. Every row sums in the same order in either case.
template <int M>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* x, std::int64_t ldx, const float* wr,
                                                      std::int64_t k, std::int64_t full, const __m256i* tail,
                                                      float* sums) {
  constexpr int kAcc = 4;
  __m256 acc[M][kAcc];
  for (int r = 0; r < M; ++r) {
    for (int t = 0; t < kAcc; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (std::int64_t p = 0; p < full; p += 8 * kAcc) {
    for (int t = 0; t < kAcc; ++t) {
      const __m256 wv = _mm256_loadu_ps(wr + p + 8 * t);
      for (int r = 0; r < M; ++r) acc[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + p + 8 * t), wv, acc[r][t]);
    }
  }
  if (full < k) {
    for (int t = 0; t < kAcc; ++t) {
      const __m256 wv = _mm256_maskload_ps(wr + full + 8 * t, tail[t]);
      for (int r = 0; r < M; ++r) {
        acc[r][t] = _mm256_fmadd_ps(_mm256_maskload_ps(x + r * ldx + full + 8 * t, tail[t]), wv, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < M; ++r) {
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    sums[r] = _mm_cvtss_f32(v);
  }
}

template <int M>
__attribute__((target("avx2,fma"))) void columns_avx2(const float* x, std::int64_t ldx, const float* w, std::int64_t k,
                                                     std::int64_t j0, std::int64_t j1, float* y, std::int64_t ldy,
                                                     float alpha, float beta) {
  constexpr int kAcc = 4;
  const std::int64_t full = k / (8 * kAcc) * (8 * kAcc);
  __m256i tail[kAcc];
  for (int t = 0; t < kAcc; ++t) {
    const std::int64_t left = std::clamp<std::int64_t>(k - full - 8 * t, 0, 8);
    // maskload takes the lanes whose sign bit is set: lane i < left.
    tail[t] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  for (std::int64_t j = j0; j < j1; ++j) {
    const float* wr = w + j * k;
    float sums[M];
    if constexpr (M <= 3) {
      dot_rows_avx2<M>(x, ldx, wr, k, full, tail, sums);
    } else {
      dot_rows_avx2<2>(x, ldx, wr, k, full, tail, sums);
      dot_rows_avx2<M - 2>(x + 2 * ldx, ldx, wr, k, full, tail, sums + 2);
    }
    for (int r = 0; r < M; ++r) {
      const float v = alpha * sums[r];
      float& out = y[r * ldy + j];
      out = beta != 0.0f ? out + v : v;
    }
  }
}

using Columns = void (*)(const float*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t, float*,
                         std::int64_t, float, float);
constexpr Columns kColumnsAvx512[kF32RowsMax] = {columns_avx512<1>, columns_avx512<2>, columns_avx512<3>, columns_avx512<4>};
constexpr Columns kColumnsAvx2[kF32RowsMax] = {columns_avx2<1>, columns_avx2<2>, columns_avx2<3>, columns_avx2<4>};

std::atomic<std::int64_t> g_limit{kF32RowsDefault};

}  // namespace

void set_f32_rows_limit(std::int64_t rows) { g_limit = std::clamp<std::int64_t>(rows, 0, kF32RowsMax); }
std::int64_t f32_rows_limit() { return g_limit.load(); }

bool have_f32_rows_kernel() { return kernel_isa() != Isa::baseline; }

void linear_f32_rows(const float* x, std::int64_t m, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t k,
                     float* y, std::int64_t ldy, float alpha, float beta) {
  if (m < 1 || m > kF32RowsMax) throw std::invalid_argument("linear_f32_rows: 1 to 4 rows");
  const Isa isa = kernel_isa();
  if (isa == Isa::baseline) throw std::logic_error("linear_f32_rows: this CPU has neither AVX-512 nor AVX2");
  const Columns run = (isa == Isa::avx512 ? kColumnsAvx512 : kColumnsAvx2)[m - 1];
  // Blocks of 32 columns; parallel_for hands each thread one contiguous run of blocks, so each thread
  // streams its own part of the weights front to back. A task is at least 64K weights: a tiny model's
  // products (stories260K) stay on one thread, where a parallel region would cost more than them.
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (32 * k));
  at::parallel_for(0, (n + 31) / 32, grain, [&](std::int64_t b0, std::int64_t b1) {
    run(x, ldx, w, k, b0 * 32, std::min(n, b1 * 32), y, ldy, alpha, beta);
  });
}

}  // namespace evalrun::ops
