// Matrix products on raw row-major buffers. Float32 products go to oneDNN's
// row-major sgemm when the build found libdnnl (the same library libtorch uses): this Debian
// OpenBLAS misdetects the CPU of these VMs (as "Prescott", no AVX) unless OPENBLAS_CORETYPE is set
// before the process starts, which makes at::mm about 6x slower than oneDNN here. Other dtypes
// (bfloat16) go through at::mm / at::addmm, which libtorch routes to oneDNN itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace evalrun::ops {

// True when float32 products run on oneDNN's sgemm (false: at::mm / OpenBLAS fallback).
bool have_onednn_sgemm();
// Tests switch the fallback on (false) to cover it; a model takes the setting at load.
void set_onednn_sgemm_enabled(bool enabled);

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C on raw float32 pointers, op = 'N' or 'T'.
// Inside an OpenMP parallel region it runs on the calling thread only.
void sgemm(char trans_a, char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// Row-major y[M, N] = alpha * x[M, K] W^T + beta * y with W [N, K] row-major (a checkpoint's [out, in]
// layout); beta 0 (y not read) or 1. Up to f32_rows_limit() rows (a decode step) on the AVX-512 row
// kernel (ops/f32_rows.hpp) where the CPU has it, which streams W at memory speed; more rows on
// oneDNN's matmul primitive (sgemm 'N','T' without it). A row's result may differ in rounding between
// the two (the tests allow float tolerance across batch sizes, tokens equal).
void linear_f32(const float* x, std::int64_t m, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t k,
                float* y, std::int64_t ldy, float alpha, float beta);

// True when gemm_bf16 runs: the build has oneDNN's matmul primitive and the CPU native bfloat16 dot
// products (AVX512-BF16), where it multiplies at about twice the float32 rate.
bool have_bf16_gemm();

// Row-major float32 C[M,N] = alpha * A op(B) with A [M,K] and B bfloat16 (raw 16-bit patterns), op =
// 'N' (B is [K,N]) or 'T' (B is [N,K]); float32 accumulation, no rounding of the result. On oneDNN's
// matmul primitive (primitives cached by shape); inside an OpenMP parallel region it runs on the
// calling thread only. Throws std::logic_error where have_bf16_gemm() is false.
void gemm_bf16(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, float* c, std::int64_t ldc);

// True when the integer products below run on oneDNN; false: a plain C++ loop (correct, slow), used
// when the build found no libdnnl. With oneDNN's headers (Debian's libdnnl-dev) they run on its
// matmul primitive (AMX or VNNI kernels where the CPU has them), else on its dnnl_gemm_* functions
// (VNNI at most). oneDNN's integer kernels are exact only with VNNI: on a CPU without it (AVX2 only)
// this is false and an exact AVX2 kernel of our own runs the products.
bool have_onednn_igemm();
// Which of those ran the last integer product, e.g. "oneDNN matmul brg:avx512_core_amx_int8".
std::string igemm_implementation();

// Row-major int32 C[M,N] = (A[M,K] - a_zero) * op(B)[K,N], A unsigned 8-bit with one zero point,
// B signed 8-bit; op = 'N' (B is [K,N]) or 'T' (B is [N,K]). Exact (int32 accumulation).
void gemm_u8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint8_t* a, std::int64_t lda,
                  std::uint8_t a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc);
// The same with signed 8-bit A and no zero point.
void gemm_s8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                  const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc);

// Signed 8-bit weights B [N, K] (row-major, the op 'T' operand of the products above) prepared for
// many products with them: with oneDNN's matmul primitive, a copy in the blocked layout its kernels
// read, made once, so a product does not repack them. `b` stays the caller's and must outlive this
// object (products the packed copy does not serve read it). a_unsigned: the activations are u8 with
// a zero point (else s8).
class PackedS8Weights {
 public:
  PackedS8Weights(std::int64_t n, std::int64_t k, const std::int8_t* b, bool a_unsigned);
  ~PackedS8Weights();
  PackedS8Weights(const PackedS8Weights&) = delete;
  PackedS8Weights& operator=(const PackedS8Weights&) = delete;

  // Row-major int32 C[M, N] = (A - a_zero) B^T, exact; A [M, K] (u8 or s8 as constructed), row
  // stride lda. Thread-safe: several threads may multiply different rows at once.
  void multiply(std::int64_t m, const void* a, std::int64_t lda, std::int32_t a_zero, std::int32_t* c,
                std::int64_t ldc) const;
  std::size_t bytes() const;  // held beyond `b` (the packed copy)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};


}  // namespace evalrun::ops
