#include "ops/gemm.hpp"

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <string>

#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
// oneDNN's public C API (dnnl.h, stable since v1.0); Debian ships the library without its headers,
// so the one function used is declared here. dnnl_dim_t is int64_t, dnnl_status_t an int enum.
extern "C" int dnnl_sgemm(char transa, char transb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
                          std::int64_t ldc);
// C = alpha * (op(A) - ao) * (op(B) - bo) + beta * C + co, row-major; offsetc 'F' = one co value.
extern "C" int dnnl_gemm_u8s8s32(char transa, char transb, char offsetc, std::int64_t M, std::int64_t N,
                                 std::int64_t K, float alpha, const std::uint8_t* A, std::int64_t lda, std::uint8_t ao,
                                 const std::int8_t* B, std::int64_t ldb, std::int8_t bo, float beta, std::int32_t* C,
                                 std::int64_t ldc, const std::int32_t* co);
extern "C" int dnnl_gemm_s8s8s32(char transa, char transb, char offsetc, std::int64_t M, std::int64_t N,
                                 std::int64_t K, float alpha, const std::int8_t* A, std::int64_t lda, std::int8_t ao,
                                 const std::int8_t* B, std::int64_t ldb, std::int8_t bo, float beta, std::int32_t* C,
                                 std::int64_t ldc, const std::int32_t* co);
#endif

namespace evalrun::ops {

namespace {
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif
std::atomic<bool> g_enabled{kCompiled};
}  // namespace

bool have_onednn_sgemm() { return g_enabled.load(); }
void set_onednn_sgemm_enabled(bool enabled) { g_enabled = enabled && kCompiled; }

void sgemm(char trans_a, char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  if (have_onednn_sgemm()) {
    const int status = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != 0) throw std::runtime_error("dnnl_sgemm failed with status " + std::to_string(status));
    return;
  }
#endif
  // Strided views over the raw buffers; at::mm handles transposed strides without copies.
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  auto A = trans_a == 'N' ? torch::from_blob(const_cast<float*>(a), {m, k}, {lda, 1}, opts)
                          : torch::from_blob(const_cast<float*>(a), {k, m}, {lda, 1}, opts).t();
  auto B = trans_b == 'N' ? torch::from_blob(const_cast<float*>(b), {k, n}, {ldb, 1}, opts)
                          : torch::from_blob(const_cast<float*>(b), {n, k}, {ldb, 1}, opts).t();
  auto C = torch::from_blob(c, {m, n}, {ldc, 1}, opts);
  if (beta == 0.0f) {
    at::mm_out(C, A, B);
    if (alpha != 1.0f) C.mul_(alpha);
  } else {
    C.addmm_(A, B, beta, alpha);
  }
}

bool have_onednn_igemm() { return kCompiled; }

namespace {
// Reference integer product for builds without oneDNN: int32 accumulation, exact.
template <typename A>
void igemm_loop(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const A* a, std::int64_t lda, int a_zero,
                const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
  at::parallel_for(0, m, 1, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        std::int32_t acc = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const std::int32_t bv = trans_b == 'N' ? b[p * ldb + j] : b[j * ldb + p];
          acc += (static_cast<std::int32_t>(a[i * lda + p]) - a_zero) * bv;
        }
        c[i * ldc + j] = acc;
      }
    }
  });
}
}  // namespace

void gemm_u8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint8_t* a, std::int64_t lda,
                  std::uint8_t a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  const std::int32_t co = 0;
  const int status =
      dnnl_gemm_u8s8s32('N', trans_b, 'F', m, n, k, 1.0f, a, lda, a_zero, b, ldb, 0, 0.0f, c, ldc, &co);
  if (status != 0) throw std::runtime_error("dnnl_gemm_u8s8s32 failed with status " + std::to_string(status));
#else
  igemm_loop(trans_b, m, n, k, a, lda, a_zero, b, ldb, c, ldc);
#endif
}

void gemm_s8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                  const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  const std::int32_t co = 0;
  const int status = dnnl_gemm_s8s8s32('N', trans_b, 'F', m, n, k, 1.0f, a, lda, 0, b, ldb, 0, 0.0f, c, ldc, &co);
  if (status != 0) throw std::runtime_error("dnnl_gemm_s8s8s32 failed with status " + std::to_string(status));
#else
  igemm_loop(trans_b, m, n, k, a, lda, 0, b, ldb, c, ldc);
#endif
}

}  // namespace evalrun::ops
