// Decode-step products of float32 models: a few rows times a weight matrix stored [out, in] (the
// checkpoint's layout), each weight row streamed once with AVX-512 dot products, or AVX2 + FMA ones on
// CPUs without AVX-512 (ops/isa.hpp picks; tests cap it to run both). Measured on an AMD
// EPYC (2 threads, the llama-110m projections): this reads the weights at 50-60 GB/s where oneDNN's
// sgemm on a batch-1 row reads the pre-transposed [in, out] copy at 21-28 GB/s, and a kernel summing
// x[p] * W^T[p, :] over the [in, out] rows at most 39 (bench notes in docs/building-and-testing.md).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Rows one call takes (four accumulators per row fill the registers at 4 rows). linear_f32 (gemm.hpp)
// gives it up to kF32RowsDefault: it beat oneDNN's matmul at every one of them (x2.04 at 1 row, x1.57
// at 4; llama_decode_bench variant fp32-rows measures the crossover).
constexpr std::int64_t kF32RowsMax = 4;
constexpr std::int64_t kF32RowsDefault = 4;

// The most rows linear_f32 gives the row kernel: kF32RowsDefault unless set (clamped to 0 ..
// kF32RowsMax; 0: never). The decode benchmark sets it to find where the GEMM overtakes the kernel.
void set_f32_rows_limit(std::int64_t rows);
std::int64_t f32_rows_limit();

// True when the CPU has AVX-512 or AVX2 + FMA (ops::kernel_isa(); else callers use a GEMM).
bool have_f32_rows_kernel();

// y[r, j] = beta * y[r, j] + alpha * sum_p x[r, p] w[j, p] for r < m <= kF32RowsMax; x rows of k
// floats (stride ldx), w [n, k] row-major, y rows of n (stride ldy); beta 0 (y not read) or 1. Each
// row's result depends on that row alone (not on m, nor on the thread count): every output is one
// thread's sum in a fixed order. Split over the threads by output columns.
void linear_f32_rows(const float* x, std::int64_t m, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t k,
                     float* y, std::int64_t ldy, float alpha, float beta);

}  // namespace evalrun::ops
