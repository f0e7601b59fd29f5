// Decode-step products of bfloat16 models: a few rows times a bfloat16 weight matrix, the weights
// streamed once at memory speed with AVX512-BF16 dot products (vdpbf16ps). libtorch 1.13's bfloat16
// at::linear reads a batch-1 decode step's weights at about 10 GB/s, which made bf16 decoding no
// faster than fp32 with half the bytes. bfloat16 values are raw 16-bit patterns (no torch here).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Rows one call takes (a decode step's batch); more rows go to a GEMM.
constexpr std::int64_t kBf16RowsMax = 8;

// True when the CPU has AVX512-BF16 (else callers keep at::linear).
bool have_bf16_rows_kernel();

// y[r, j] = bf16(sum_p x[r, p] w[j, p] + bias[j]) for r < m <= kBf16RowsMax: x [m, k] and y [m, n]
// contiguous rows, w [n, k] row-major, bias [n] or null; float32 accumulation, one rounding to bfloat16
// (ties to even) at the end, as torch's bfloat16 linear. Each row's result depends on that row alone
// (not on m). Split over the threads by output columns.
void linear_bf16_rows(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w,
                      const std::uint16_t* bias, std::int64_t n, std::uint16_t* y);

}  // namespace evalrun::ops
