// Decode-step products of FP8 layers: a few float32 rows times float8 e4m3 weights stored [out, in],
// each weight row streamed once (1 byte per weight) and decoded to float32 in registers (AVX-512, or
// AVX2 + F16C on CPUs without it; ops/isa.hpp picks, tests cap it to run both). The layer's
// other path decodes 64-row tiles to float32 in memory and runs sgemm on them, which for a decode
// step's one row moves 5 bytes per weight instead of 1 (llama_decode_bench variant fp8-rows compares
// the two).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Rows one call takes; more go to the tiles. Four accumulators per row fill the registers at 4 rows,
// so 5-8 rows run as two groups over each block of weight rows, the second reading them from cache:
// the weights still leave memory once (a batch-8 decode step).
constexpr std::int64_t kFp8RowsMax = 8;

// True when the CPU has AVX-512 or AVX2 + FMA + F16C (ops::kernel_isa(); else callers keep the tiles).
bool have_fp8_rows_kernel();

// The most rows Fp8Linear gives the kernel: kFp8RowsMax unless set (clamped to 0 .. kFp8RowsMax; 0:
// never). The decode benchmark sets it to compare the kernel with the tiles.
void set_fp8_rows_limit(std::int64_t rows);
std::int64_t fp8_rows_limit();

// y[r, j] = beta * y[r, j] + alpha * scale[j * scale_stride] * sum_p x[r, p] e4m3(w[j, p]) for
// r < m <= kFp8RowsMax; x rows of k floats (stride ldx), w [n, k] e4m3 codes row-major (NaN codes
// refused by the caller), scale_stride 1 (per output channel) or 0 (per tensor), y rows of n (stride
// ldy); beta 0 (y not read) or 1. The decoded weights are exact; the sums are float32 in a fixed order
// per output, so a row's result depends on that row alone. Split over the threads by output columns.
void linear_fp8_rows(const float* x, std::int64_t m, std::int64_t ldx, const std::uint8_t* w, const float* scale,
                     std::int64_t scale_stride, std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, float alpha,
                     float beta);

}  // namespace evalrun::ops
