#include "ops/gemm.hpp"

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <string>

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#endif

#if defined(EVALRUN_HAVE_ONEDNN_SGEMM) && !defined(EVALRUN_HAVE_ONEDNN_MATMUL)
// oneDNN's public C API (dnnl.h, stable since v1.0); without Debian's libdnnl-dev (headers) the
// functions used are declared here. dnnl_dim_t is int64_t, dnnl_status_t an int enum.
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

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
namespace {

// Integer products through oneDNN's matmul primitive: its brgemm kernels use AMX (or VNNI) where the
// CPU has them, which the BLAS-like dnnl_gemm_* functions of this oneDNN (2.6) do not (they stop at
// VNNI: 2-3x slower on this CPU). A primitive is made for one shape, so they are cached by shape;
// oneDNN's own primitive cache would make re-creation cheap too, but the descriptors cost more than
// a map look-up. B (the weights) stays in its plain layout; the primitive repacks it per call, which
// costs O(N K) against the product's O(M N K).
struct MatmulKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  char trans_b;
  bool a_unsigned, a_zero;
  auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, trans_b, a_unsigned, a_zero); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct MatmulEngine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::map<MatmulKey, std::shared_ptr<dnnl::matmul>> cache;
  std::string impl;  // implementation name of the last primitive made (for logs and benchmarks)
  bool failed = false;  // no matmul implementation: the dnnl_gemm_* functions are used instead
};

MatmulEngine& matmul_engine() {
  static MatmulEngine e;
  return e;
}

// The primitive for this shape, or null when oneDNN has none (the caller falls back).
std::shared_ptr<dnnl::matmul> matmul_for(const MatmulKey& key) {
  MatmulEngine& e = matmul_engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (e.failed) return nullptr;
  auto it = e.cache.find(key);
  if (it != e.cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  try {
    const dnnl::memory::desc a({key.m, key.k}, key.a_unsigned ? dt::u8 : dt::s8, {key.lda, 1});
    // B as the logical [K, N] matrix: row-major [K, N] ('N') or the transpose of row-major [N, K] ('T').
    const dnnl::memory::desc b({key.k, key.n}, dt::s8,
                               key.trans_b == 'N' ? dnnl::memory::dims{key.ldb, 1} : dnnl::memory::dims{1, key.ldb});
    const dnnl::memory::desc c({key.m, key.n}, dt::s32, {key.ldc, 1});
    dnnl::primitive_attr attr;
    if (key.a_zero) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, e.engine);
    e.impl = pd.impl_info_str();
    // Bounded: a run sees a few hundred shapes at most (Int8Linear rounds M up).
    if (e.cache.size() >= 4096) e.cache.clear();
    auto prim = std::make_shared<dnnl::matmul>(pd);
    e.cache.emplace(key, prim);
    return prim;
  } catch (const dnnl::error&) {
    e.failed = true;
    return nullptr;
  }
}

// True when the product ran.
bool matmul_igemm(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, bool a_unsigned,
                  std::int64_t lda, std::int32_t a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c,
                  std::int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  const MatmulKey key{m, n, k, lda, ldb, ldc, trans_b, a_unsigned, a_zero != 0};
  auto prim = matmul_for(key);
  if (!prim) return false;
  using dt = dnnl::memory::data_type;
  const dnnl::engine& eng = matmul_engine().engine;
  thread_local dnnl::stream stream(eng);
  dnnl::memory A({{m, k}, a_unsigned ? dt::u8 : dt::s8, {lda, 1}}, eng, const_cast<void*>(a));
  dnnl::memory B({{k, n}, dt::s8, trans_b == 'N' ? dnnl::memory::dims{ldb, 1} : dnnl::memory::dims{1, ldb}}, eng,
                 const_cast<std::int8_t*>(b));
  dnnl::memory C({{m, n}, dt::s32, {ldc, 1}}, eng, c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}};
  std::int32_t zero = a_zero;
  if (a_zero != 0) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory({{1}, dt::s32, {1}}, eng, &zero));
  try {
    prim->execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    throw std::runtime_error(std::string("oneDNN int8 matmul failed: ") + err.what());
  }
  return true;
}

}  // namespace
#endif

std::string igemm_implementation() {
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  {
    MatmulEngine& e = matmul_engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    if (!e.failed && !e.impl.empty()) return "oneDNN matmul " + e.impl;
    if (!e.failed) return "oneDNN matmul (no product run yet)";
  }
#endif
  return kCompiled ? "oneDNN dnnl_gemm_*" : "C++ loop";
}

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
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  if (matmul_igemm(trans_b, m, n, k, a, true, lda, a_zero, b, ldb, c, ldc)) return;
#endif
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
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  if (matmul_igemm(trans_b, m, n, k, a, false, lda, 0, b, ldb, c, ldc)) return;
#endif
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  const std::int32_t co = 0;
  const int status = dnnl_gemm_s8s8s32('N', trans_b, 'F', m, n, k, 1.0f, a, lda, 0, b, ldb, 0, 0.0f, c, ldc, &co);
  if (status != 0) throw std::runtime_error("dnnl_gemm_s8s8s32 failed with status " + std::to_string(status));
#else
  igemm_loop(trans_b, m, n, k, a, lda, 0, b, ldb, c, ldc);
#endif
}

}  // namespace evalrun::ops
