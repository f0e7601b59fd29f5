// Decode-step integer products of INT8 W8A8 layers: a few rows of 8-bit activations times signed 8-bit
// weights stored [out, in], each weight row streamed once with AVX512-VNNI (vpdpbusd), or on CPUs
// without it with AVX2 (weights sign-extended to 16 bits, vpmaddwd), int32 sums, exact either way.
// oneDNN's matmul primitive serves many rows; for a decode step's one to four rows this kernel reads
// the weights at memory speed (llama_decode_bench variants int8 / int8-lm_head8 measure it).
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Rows one call takes (more go to the GEMM).
constexpr std::int64_t kInt8RowsMax = 4;

// True when the CPU has AVX512-VNNI or AVX2 (ops::kernel_isa() not the baseline), else callers use
// the GEMM.
bool have_int8_rows_kernel();

// The most rows Int8Linear gives the kernel: kInt8RowsMax unless set (clamped to 0 .. kInt8RowsMax;
// 0: never). The decode benchmark sets it to compare the kernel with oneDNN's matmul.
void set_int8_rows_limit(std::int64_t rows);
std::int64_t int8_rows_limit();

// Sums over each weight row, colsum[j] = sum_p w[j, p] (rows of k weights, stride ldw), which the VNNI
// kernel needs (computed once per layer), and whether the version this CPU runs reads them.
bool int8_rows_need_row_sums();
void int8_row_sums(const std::int8_t* w, std::int64_t ldw, std::int64_t n, std::int64_t k, std::int32_t* colsum);

// c[r, j] = sum_p (a[r, p] - zero) w[j, p], exactly, for r < m <= kInt8RowsMax. a rows of k bytes
// (stride lda): signed 8-bit values (a_signed, zero must be 0) or unsigned ones with a zero point; w
// [n, k] row-major with rows ldw >= k apart; colsum from int8_row_sums; c rows of n int32 (stride ldc). vpdpbusd multiplies
// unsigned by signed bytes, so signed activations are offset by 128 and 128 colsum[j] taken back off
// (the AVX2 version takes the zero point off the activations instead and does not read colsum).
// Split over the threads by output columns; the result is exact, so it equals the GEMM's.
void int8_rows(const void* a, bool a_signed, std::int32_t zero, std::int64_t m, std::int64_t lda, const std::int8_t* w,
               std::int64_t ldw, const std::int32_t* colsum, std::int64_t n, std::int64_t k, std::int32_t* c,
               std::int64_t ldc);

}  // namespace evalrun::ops
