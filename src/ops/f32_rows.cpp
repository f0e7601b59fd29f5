#include "ops/f32_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "ops/isa.hpp"
#include "ops/row_dot_avx2.hpp"

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

// The AVX2 version (x86-64-v3 CPUs without AVX-512: AMD Zen 1-3, Intel's client cores): see
// ops/row_dot_avx2.hpp.
struct F32Loader {
  const float* row;
  const avx2_rows::Tail& end;
  EVALRUN_AVX2_ROWS_TARGET __m256 at(std::int64_t p) const { return _mm256_loadu_ps(row + p); }
  EVALRUN_AVX2_ROWS_TARGET __m256 tail(int t) const { return _mm256_maskload_ps(row + end.full + 8 * t, end.mask[t]); }
};

template <int M>
EVALRUN_AVX2_ROWS_TARGET void columns_avx2(const float* x, std::int64_t ldx, const float* w, std::int64_t k,
                                           std::int64_t j0, std::int64_t j1, float* y, std::int64_t ldy, float alpha,
                                           float beta) {
  const avx2_rows::Tail tail(k);
  for (std::int64_t j = j0; j < j1; ++j) {
    float sums[M];
    avx2_rows::dot_rows<M>(x, ldx, F32Loader{w + j * k, tail}, tail, sums);
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
