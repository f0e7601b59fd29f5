// The AVX2 half of the float32, bfloat16 and FP8 decode-step row kernels (internal to src/ops:
// f32_rows.cpp, bf16_rows.cpp, fp8_rows.cpp; int8_rows.cpp uses Tail and LastStep): M float32 input rows against one weight row, the weights given by the caller's
// loader (float32 loads, or FP8 codes decoded in registers). Eight floats a vector and sixteen
// registers: four accumulators per row (a step of 32 weights), so at most three rows fit beside the
// weight vector and the input; four rows take two passes of two over the weight row, the second
// reading it from L1. Every row sums in the same order whatever M is (decode results must not depend
// on the batch). Compiled for AVX2 + FMA + F16C (the FP8 loader converts half floats), which
// ops::kernel_isa() requires of Isa::avx2.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#define EVALRUN_AVX2_ROWS_TARGET __attribute__((target("avx2,fma,f16c")))

namespace evalrun::ops::avx2_rows {

// Where a row of k weights ends: `full` weights in whole steps of 32, then (when `partial`) masks for
// the four 8-lane vectors of the last, partial step (maskload takes the lanes whose sign bit is set:
// lane i < left).
struct Tail {
  std::int64_t full;
  bool partial;
  __m256i mask[4];

  EVALRUN_AVX2_ROWS_TARGET explicit Tail(std::int64_t k) : full(k / 32 * 32), partial(full < k) {
    for (int t = 0; t < 4; ++t) {
      const std::int64_t left = std::clamp<std::int64_t>(k - full - 8 * t, 0, 8);
      mask[t] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
  }
};

// A weight row's last, partial step of raw codes (bfloat16, FP8), zero-padded to a whole step, for a
// loader's tail(): filled only when the row ends in one (tail() is read only then).
template <class Code>
struct LastStep {
  Code codes[32];
  LastStep(const Code* row, const Tail& end, std::int64_t k) {
    if (!end.partial) return;
    std::memset(codes, 0, sizeof codes);
    std::memcpy(codes, row + end.full, static_cast<std::size_t>(k - end.full) * sizeof(Code));
  }
};

// sums[r] = sum_p x[r, p] w[p] for r < M <= 3. Loader: `__m256 at(p)`, the 8 weights from p (p < full),
// and `__m256 tail(t)`, the t-th 8 of the partial step, zero past k.
template <int M, class Loader>
EVALRUN_AVX2_ROWS_TARGET inline void dot_pass(const float* x, std::int64_t ldx, const Loader& w, const Tail& tail,
                                              float* sums) {
  __m256 acc[M][4];
  for (int r = 0; r < M; ++r) {
    for (int t = 0; t < 4; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (std::int64_t p = 0; p < tail.full; p += 32) {
    for (int t = 0; t < 4; ++t) {
      const __m256 wv = w.at(p + 8 * t);
      for (int r = 0; r < M; ++r) acc[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + p + 8 * t), wv, acc[r][t]);
    }
  }
  if (tail.partial) {
    for (int t = 0; t < 4; ++t) {
      const __m256 wv = w.tail(t);
      for (int r = 0; r < M; ++r) {
        acc[r][t] = _mm256_fmadd_ps(_mm256_maskload_ps(x + r * ldx + tail.full + 8 * t, tail.mask[t]), wv, acc[r][t]);
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

// The same for M <= 4 rows (four in two passes).
template <int M, class Loader>
EVALRUN_AVX2_ROWS_TARGET inline void dot_rows(const float* x, std::int64_t ldx, const Loader& w, const Tail& tail,
                                              float* sums) {
  if constexpr (M <= 3) {
    dot_pass<M>(x, ldx, w, tail, sums);
  } else {
    dot_pass<2>(x, ldx, w, tail, sums);
    dot_pass<M - 2>(x + 2 * ldx, ldx, w, tail, sums + 2);
  }
}

}  // namespace evalrun::ops::avx2_rows
