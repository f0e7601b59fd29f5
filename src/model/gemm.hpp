// Matrix products used by the model, internal to src/model. Float32 products go to oneDNN's
// row-major sgemm when the build found libdnnl (the same library libtorch uses): this Debian
// OpenBLAS misdetects the CPU of these VMs (as "Prescott", no AVX) unless OPENBLAS_CORETYPE is set
// before the process starts, which makes at::mm about 6x slower than oneDNN here. Other dtypes
// (bfloat16) go through at::mm / at::addmm, which libtorch routes to oneDNN itself.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace evalrun::model {

// True when float32 products run on oneDNN's sgemm (false: at::mm / OpenBLAS fallback).
bool have_onednn_sgemm();
// Tests switch the fallback on (false) to cover it; a model takes the setting at load.
void set_onednn_sgemm_enabled(bool enabled);

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C on raw float32 pointers, op = 'N' or 'T'.
// Inside an OpenMP parallel region it runs on the calling thread only.
void sgemm(char trans_a, char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// y[M,N] = beta * y + x[M,K] @ w_t[K,N]. All three contiguous, same dtype; w_t is the
// pre-transposed weight. beta is 0 or 1.
void matmul_into(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w_t, float beta);

}  // namespace evalrun::model
