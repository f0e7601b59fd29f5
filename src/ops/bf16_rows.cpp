#include "ops/bf16_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ops/bfloat16.hpp"
#include "ops/gemm.hpp"
#include "ops/isa.hpp"
#include "ops/row_dot_avx2.hpp"

namespace evalrun::ops {
namespace {

// Output columns j0 .. j1 of M rows (M a template argument: the accumulators stay in registers).
// Two accumulators per row, 64 bfloat16 per step of k, whatever M is (a row sums in the same order
// alone or beside others; two chains keep vdpbf16ps' latency off the weight stream); the tail in
// masked 32-value pieces (zeros add nothing).
template <int M>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void columns_avx512(const std::uint16_t* x, std::int64_t k,
                                                                   const std::uint16_t* w, const std::uint16_t* bias,
                                                                   std::int64_t n, std::int64_t j0, std::int64_t j1,
                                                                   std::uint16_t* y) {
  const std::int64_t full = k / 64 * 64;
  const std::int64_t left0 = std::clamp<std::int64_t>(k - full, 0, 32), left1 = std::clamp<std::int64_t>(k - full - 32, 0, 32);
  const __mmask32 tail0 = static_cast<__mmask32>((1ull << left0) - 1ull), tail1 = static_cast<__mmask32>((1ull << left1) - 1ull);
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::uint16_t* wr = w + j * k;
    __m512 acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < full; p += 64) {
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr + p));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr + p + 32));
      for (int r = 0; r < M; ++r) {
        acc0[r] = _mm512_dpbf16_ps(acc0[r], reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * k + p)), w0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * k + p + 32)), w1);
      }
    }
    if (full < k) {
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail0, wr + full));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail1, wr + full + 32));
      for (int r = 0; r < M; ++r) {
        acc0[r] = _mm512_dpbf16_ps(acc0[r], reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail0, x + r * k + full)), w0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail1, x + r * k + full + 32)),
                                   w1);
      }
    }
    const float b = bias != nullptr ? float_of_bf16(bias[j]) : 0.0f;
    for (int r = 0; r < M; ++r) y[r * n + j] = bf16_of(_mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) + b);
  }
}

// The AVX2 version (ops/row_dot_avx2.hpp): x widened to float32 once per call, each weight widened in
// registers (zero-extend to 32 bits, shift into the high half: exact), in passes of at most 3 rows (the
// later passes find the weight row in L1). A row sums in the same order in any pass.
struct Bf16Loader {
  const std::uint16_t* row;
  avx2_rows::LastStep<std::uint16_t> last;
  Bf16Loader(const std::uint16_t* r, const avx2_rows::Tail& end, std::int64_t k) : row(r), last(r, end, k) {}
  EVALRUN_AVX2_ROWS_TARGET static __m256 widen(const std::uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  EVALRUN_AVX2_ROWS_TARGET __m256 at(std::int64_t p) const { return widen(row + p); }
  EVALRUN_AVX2_ROWS_TARGET __m256 tail(int t) const { return widen(last.codes + 8 * t); }
};

template <int M, class Loader>
EVALRUN_AVX2_ROWS_TARGET inline void passes(const float* xf, std::int64_t k, const Loader& w, const avx2_rows::Tail& tail,
                                            float* sums) {
  constexpr int kFirst = M < 3 ? M : 3;
  avx2_rows::dot_pass<kFirst>(xf, k, w, tail, sums);
  if constexpr (M > kFirst) passes<M - kFirst>(xf + kFirst * k, k, w, tail, sums + kFirst);
}

template <int M>
EVALRUN_AVX2_ROWS_TARGET void columns_avx2(const float* xf, std::int64_t k, const std::uint16_t* w,
                                           const std::uint16_t* bias, std::int64_t n, std::int64_t j0, std::int64_t j1,
                                           std::uint16_t* y) {
  const avx2_rows::Tail tail(k);
  for (std::int64_t j = j0; j < j1; ++j) {
    const Bf16Loader loader(w + j * k, tail, k);
    float sums[M];
    passes<M>(xf, k, loader, tail, sums);
    const float b = bias != nullptr ? float_of_bf16(bias[j]) : 0.0f;
    for (int r = 0; r < M; ++r) y[r * n + j] = bf16_of(sums[r] + b);
  }
}

using Columns = void (*)(const std::uint16_t*, std::int64_t, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                         std::int64_t, std::int64_t, std::uint16_t*);
constexpr Columns kColumnsAvx512[kBf16RowsMax] = {columns_avx512<1>, columns_avx512<2>, columns_avx512<3>,
                                                  columns_avx512<4>, columns_avx512<5>, columns_avx512<6>,
                                                  columns_avx512<7>, columns_avx512<8>};
using ColumnsF = void (*)(const float*, std::int64_t, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                          std::int64_t, std::int64_t, std::uint16_t*);
constexpr ColumnsF kColumnsAvx2[kBf16RowsMax] = {columns_avx2<1>, columns_avx2<2>, columns_avx2<3>, columns_avx2<4>,
                                                 columns_avx2<5>, columns_avx2<6>, columns_avx2<7>, columns_avx2<8>};

bool cpu_has_avx512_bf16() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return yes;
}

// bfloat16 -> float32 of n values (exact), split over the threads when there are many.
void widen(const std::uint16_t* src, std::int64_t count, float* dst) {
  at::parallel_for(0, count, 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) dst[i] = float_of_bf16(src[i]);
  });
}

// bf16_of_floats with AVX-512, 16 values at a time.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void bf16_of_avx512(const float* x, std::int64_t n,
                                                                          std::uint16_t* y) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bf16_of_lanes(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(y + i, lanes, bf16_of_lanes(_mm512_maskz_loadu_ps(lanes, x + i)));
  }
}

}  // namespace

bool have_bf16_rows_kernel() { return kernel_isa() != Isa::baseline; }
bool have_native_bf16_gemm() { return cpu_has_avx512_bf16(); }

void linear_bf16_rows(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w,
                      const std::uint16_t* bias, std::int64_t n, std::uint16_t* y) {
  if (m < 1 || m > kBf16RowsMax) throw std::invalid_argument("linear_bf16_rows: 1 to 8 rows");
  if (!have_bf16_rows_kernel()) throw std::logic_error("linear_bf16_rows: this CPU has neither AVX512-BF16 nor AVX2");
  // Blocks of 64 columns (64 x k weights: 96 KB at k = 768) so both threads stream their own rows;
  // a task is at least 64K weights, so a tiny model's products stay on one thread.
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (64 * k));
  if (cpu_has_avx512_bf16() && kernel_isa() == Isa::avx512) {
    const Columns run = kColumnsAvx512[m - 1];
    at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
      run(x, k, w, bias, n, b0 * 64, std::min(n, b1 * 64), y);
    });
    return;
  }
  // Reused: a decode step allocates nothing. (A thread_local named inside the lambdas would be the
  // worker thread's own, hence the pointer.)
  thread_local std::vector<float> x_buffer;
  x_buffer.resize(static_cast<std::size_t>(m * k));
  float* const xf = x_buffer.data();
  widen(x, m * k, xf);
  const ColumnsF run = kColumnsAvx2[m - 1];
  at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
    run(xf, k, w, bias, n, b0 * 64, std::min(n, b1 * 64), y);
  });
}

void linear_bf16_tiles(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w, Bf16Layout layout,
                       const std::uint16_t* bias, std::int64_t n, std::uint16_t* y, float beta) {
  if (m < 1 || k < 1 || n < 1) throw std::invalid_argument("linear_bf16_tiles: empty product");
  // Tiles of about 1 MB of float32 weights (at least 16 output columns), so the widened copy stays in
  // the last level cache while the GEMM reads it; the float32 output is kept per tile too (m x tile),
  // so a long sequence's logits over a large vocabulary never exist in float32 whole.
  const std::int64_t tile = std::min(n, std::max<std::int64_t>(16, (std::int64_t{1} << 18) / k));
  thread_local std::vector<float> x_buffer, w_buffer, y_buffer;  // the worker threads use the pointers
  x_buffer.resize(static_cast<std::size_t>(m * k));
  w_buffer.resize(static_cast<std::size_t>(tile * k));
  y_buffer.resize(static_cast<std::size_t>(m * tile));
  float* const xf = x_buffer.data();
  float* const wf = w_buffer.data();
  float* const yf = y_buffer.data();
  widen(x, m * k, xf);
  for (std::int64_t j0 = 0; j0 < n; j0 += tile) {
    const std::int64_t cols = std::min(tile, n - j0);
    if (layout == Bf16Layout::out_in) {
      widen(w + j0 * k, cols * k, wf);  // rows j0 .. j0 + cols, contiguous
      linear_f32(xf, m, k, wf, cols, k, yf, cols, 1.0f, 0.0f);
    } else {
      at::parallel_for(0, k, std::max<std::int64_t>(1, 65536 / cols), [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          for (std::int64_t j = 0; j < cols; ++j) wf[p * cols + j] = float_of_bf16(w[p * n + j0 + j]);
        }
      });
      sgemm('N', 'N', m, cols, k, 1.0f, xf, k, wf, cols, 0.0f, yf, cols);
    }
    at::parallel_for(0, m, std::max<std::int64_t>(1, 65536 / cols), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t j = 0; j < cols; ++j) {
          std::uint16_t& out = y[r * n + j0 + j];
          float v = yf[r * cols + j];
          if (bias != nullptr) v += float_of_bf16(bias[j0 + j]);
          if (beta != 0.0f) v += float_of_bf16(out);
          out = bf16_of(v);
        }
      }
    });
  }
}

void bf16_of_floats(const float* x, std::int64_t n, std::uint16_t* y) {
  if (kernel_isa() == Isa::avx512) return bf16_of_avx512(x, n, y);
  for (std::int64_t i = 0; i < n; ++i) y[i] = bf16_of(x[i]);
}

}  // namespace evalrun::ops
