#include "model/gemm.hpp"

#include <atomic>
#include <stdexcept>

#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
// oneDNN's public C API (dnnl.h, stable since v1.0); Debian ships the library without its headers,
// so the one function used is declared here. dnnl_dim_t is int64_t, dnnl_status_t an int enum.
extern "C" int dnnl_sgemm(char transa, char transb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
                          std::int64_t ldc);
#endif

namespace evalrun::model {

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

void matmul_into(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w_t, float beta) {
  const std::int64_t m = x.size(0), k = x.size(1), n = w_t.size(1);
  if (x.scalar_type() == torch::kFloat32 && have_onednn_sgemm()) {
    sgemm('N', 'N', m, n, k, 1.0f, x.data_ptr<float>(), k, w_t.data_ptr<float>(), n, beta, y.data_ptr<float>(), n);
    return;
  }
  if (beta == 0.0f) {
    at::mm_out(y, x, w_t);
  } else {
    y.addmm_(x, w_t);
  }
}

}  // namespace evalrun::model
