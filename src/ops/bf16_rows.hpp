// Products of bfloat16 models with bfloat16 weights [out, in] (the checkpoint's layout). Decode steps
// (a few rows) stream the weights once at memory speed: with AVX512-BF16 dot products (vdpbf16ps), or
// on AVX2 CPUs by widening each bfloat16 to float32 in registers (a shift) and FMAs. More rows (prefill)
// go to oneDNN's native bfloat16 matmul (at::linear) where the CPU has AVX512-BF16, and elsewhere to
// float32 tiles of the weights and the float32 GEMM: libtorch 1.13's bfloat16 at::linear runs a scalar
// loop on AVX2 CPUs (1.5 GFLOP/s measured on an AMD EPYC, 70x slower than its float32 GEMM), and reads a
// batch-1 decode step's weights at about 10 GB/s even with AVX-512. Every route accumulates in float32
// and rounds once to bfloat16, as torch's bfloat16 linear does. bfloat16 values are raw 16-bit patterns.
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Rows one call of the row kernel takes (a decode step's batch); more rows go to a GEMM.
constexpr std::int64_t kBf16RowsMax = 8;

// True when the CPU has AVX512-BF16 or AVX2 (ops::kernel_isa() not the baseline).
bool have_bf16_rows_kernel();
// True when the CPU has AVX512-BF16, where oneDNN's bfloat16 matmul (at::linear) is the GEMM of
// more than kBf16RowsMax rows; false: linear_bf16_tiles is.
bool have_native_bf16_gemm();

// y[r, j] = bf16(sum_p x[r, p] w[j, p] + bias[j]) for r < m <= kBf16RowsMax: x [m, k] and y [m, n]
// contiguous rows, w [n, k] row-major, bias [n] or null; float32 accumulation, one rounding to bfloat16
// (ties to even) at the end. Each row's result depends on that row alone (not on m). Split over the
// threads by output columns.
void linear_bf16_rows(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w,
                      const std::uint16_t* bias, std::int64_t n, std::uint16_t* y);

// y[i] = bf16_of(x[i]) for i < n (ops/bfloat16.hpp's rounding, 16 values at a time with AVX-512).
void bf16_of_floats(const float* x, std::int64_t n, std::uint16_t* y);

// The weights' layout for linear_bf16_tiles: [n, k] (a checkpoint's [out, in], the decoders') or
// [k, n] (pre-transposed [in, out], the encoders').
enum class Bf16Layout { out_in, in_out };

// y = bf16(x W^T + bias + beta * y) for any m, beta 0 (y not read) or 1: x and tiles of w widened to
// float32 (exactly), multiplied by the float32 GEMM (ops::linear_f32, or ops::sgemm for in_out), the
// sum rounded once (torch's addmm). Buffers are kept per thread between calls.
void linear_bf16_tiles(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w, Bf16Layout layout,
                       const std::uint16_t* bias, std::int64_t n, std::uint16_t* y, float beta = 0.0f);

}  // namespace evalrun::ops
