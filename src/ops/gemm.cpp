#include "ops/gemm.hpp"

#include "ops/bf16_rows.hpp"
#include "ops/f32_rows.hpp"
#include "ops/int8_rows.hpp"

#include <torch/torch.h>


#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>
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

namespace {

// oneDNN's integer kernels are exact only with VNNI (AVX512-VNNI, AVX-VNNI; AMX CPUs have it too): on
// AVX2 without it they add pairs of u8 x s8 products in 16 bits with saturation (vpmaddubsw), so
// products of large values come out wrong (seen on an AVX2-only AMD EPYC). There the exact kernel
// below runs instead.
bool onednn_int8_exact() {
  static const bool exact = __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
  return exact;
}

// One output tile of the exact product with B as [N, K] rows, for CPUs without AVX2 (no int8 row
// kernel): (a - a_zero) widened to int16 once per row.
void exact_tile(const std::int16_t* a16, const std::int8_t* b, std::int64_t ldb, std::int64_t j0, std::int64_t j1,
                std::int64_t k, std::int32_t* c) {
  for (std::int64_t j = j0; j < j1; ++j) {
    std::int32_t total = 0;
    for (std::int64_t p = 0; p < k; ++p) total += static_cast<std::int32_t>(a16[p]) * b[j * ldb + p];
    c[j] = total;
  }
}

// Exact C[M,N] = (A - a_zero) * op(B): groups of up to kInt8RowsMax rows on the int8 row kernel, each
// group streaming B once (1.7-2.6x one pass over B per row at 2-4 rows: llama_decode_bench int8-rows
// on an AVX2 EPYC); without one (no AVX2), parallel over (row, 64 columns) tiles so a decode step's
// single row still spreads over the threads.
template <typename A>
void exact_igemm(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const A* a, std::int64_t lda,
                 int a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  std::vector<std::int8_t> bt;
  if (trans_b == 'N') {  // B given as [K, N]: transposed once into [N, K] rows
    bt.resize(static_cast<std::size_t>(n * k));
    for (std::int64_t p = 0; p < k; ++p) {
      for (std::int64_t j = 0; j < n; ++j) bt[static_cast<std::size_t>(j * k + p)] = b[p * ldb + j];
    }
    b = bt.data();
    ldb = k;
  }
  if (have_int8_rows_kernel()) {
    std::vector<std::int32_t> sums;
    if (int8_rows_need_row_sums()) {
      sums.resize(static_cast<std::size_t>(n));
      int8_row_sums(b, ldb, n, k, sums.data());
    }
    constexpr bool a_signed = std::is_same_v<A, std::int8_t>;
    for (std::int64_t i0 = 0; i0 < m; i0 += kInt8RowsMax) {
      int8_rows(a + i0 * lda, a_signed, a_zero, std::min(kInt8RowsMax, m - i0), lda, b, ldb, sums.data(), n, k,
                c + i0 * ldc, ldc);
    }
    return;
  }
  constexpr std::int64_t kTile = 64;
  const std::int64_t tiles = (n + kTile - 1) / kTile;
  at::parallel_for(0, m * tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    thread_local std::vector<std::int16_t> a16;
    if (a16.size() < static_cast<std::size_t>(k)) a16.resize(static_cast<std::size_t>(k));
    std::int64_t widened = -1;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t i = t / tiles, j0 = (t % tiles) * kTile, j1 = std::min(n, j0 + kTile);
      if (i != widened) {
        for (std::int64_t p = 0; p < k; ++p) a16[static_cast<std::size_t>(p)] = static_cast<std::int16_t>(a[i * lda + p] - a_zero);
        widened = i;
      }
      exact_tile(a16.data(), b, ldb, j0, j1, k, c + i * ldc);
    }
  });
}

}  // namespace

bool have_onednn_igemm() { return kCompiled && onednn_int8_exact(); }

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
namespace {

// Integer products through oneDNN's matmul primitive: its brgemm kernels use AMX (or VNNI) where the
// CPU has them, which the BLAS-like dnnl_gemm_* functions of this oneDNN (2.6) do not (they stop at
// VNNI: 2-3x slower on this CPU). A primitive is made for one shape, so they are cached by shape
// (oneDNN's own primitive cache would make re-creation cheap too, but the descriptors cost more than
// a map look-up). Scratchpads are per thread (user mode): several threads may run one primitive at
// once (Int8Linear's row blocks).
using dt = dnnl::memory::data_type;

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::string impl;     // implementation name of the last primitive made (for logs and benchmarks)
  bool failed = false;  // no matmul implementation: the dnnl_gemm_* functions are used instead
};

Engine& matmul_engine() {
  static Engine e;
  return e;
}

struct Primitive {
  dnnl::matmul matmul;
  std::size_t scratchpad = 0;
};

// A primitive for C[M, N] = (A - a_zero) B; `b` is the weights' memory desc (plain or packed).
// Throws dnnl::error when oneDNN has no implementation.
std::shared_ptr<Primitive> make_primitive(std::int64_t m, std::int64_t k, std::int64_t n, std::int64_t lda,
                                          std::int64_t ldc, bool a_unsigned, bool a_zero,
                                          const dnnl::memory::desc& b) {
  Engine& e = matmul_engine();
  const dnnl::memory::desc a({m, k}, a_unsigned ? dt::u8 : dt::s8, {lda, 1});
  const dnnl::memory::desc c({m, n}, dt::s32, {ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (a_zero) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, e.engine);
  if (pd.weights_desc() != b) throw dnnl::error(dnnl_unimplemented, "weights layout not accepted");
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.impl = pd.impl_info_str();
  }
  return std::make_shared<Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size()});
}

// Runs a primitive on this thread's stream with this thread's scratchpad added to `args`.
void run_primitive(const Primitive& p, std::unordered_map<int, dnnl::memory>& args, const char* what) {
  const dnnl::engine& eng = matmul_engine().engine;
  thread_local dnnl::stream stream(eng);
  thread_local std::vector<char> scratch;
  if (scratch.size() < p.scratchpad) scratch.resize(p.scratchpad);
  args.emplace(DNNL_ARG_SCRATCHPAD,
               dnnl::memory({{static_cast<std::int64_t>(p.scratchpad)}, dt::u8, {1}}, eng, scratch.data()));
  try {
    p.matmul.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    throw std::runtime_error(std::string("oneDNN ") + what + " matmul failed: " + err.what());
  }
}

void execute(const Primitive& p, std::int64_t m, std::int64_t k, std::int64_t n, const void* a, bool a_unsigned,
             std::int64_t lda, std::int32_t a_zero, bool use_zero, const dnnl::memory& b, std::int32_t* c,
             std::int64_t ldc) {
  const dnnl::engine& eng = matmul_engine().engine;
  dnnl::memory A({{m, k}, a_unsigned ? dt::u8 : dt::s8, {lda, 1}}, eng, const_cast<void*>(a));
  dnnl::memory C({{m, n}, dt::s32, {ldc, 1}}, eng, c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, C}};
  std::int32_t zero = a_zero;
  if (use_zero) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory({{1}, dt::s32, {1}}, eng, &zero));
  run_primitive(p, args, "int8");
}

// Products with plain B, primitives cached by shape.
struct PlainKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  char trans_b;
  bool a_unsigned, a_zero;
  auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, trans_b, a_unsigned, a_zero); }
  bool operator<(const PlainKey& o) const { return tie() < o.tie(); }
};

dnnl::memory::desc plain_b(std::int64_t k, std::int64_t n, char trans_b, std::int64_t ldb) {
  // B as the logical [K, N] matrix: row-major [K, N] ('N') or the transpose of row-major [N, K] ('T').
  return {{k, n}, dt::s8, trans_b == 'N' ? dnnl::memory::dims{ldb, 1} : dnnl::memory::dims{1, ldb}};
}

// True when the product ran (false: no oneDNN matmul here, the caller falls back).
bool matmul_igemm(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, bool a_unsigned,
                  std::int64_t lda, std::int32_t a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c,
                  std::int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  static std::mutex mutex;
  static std::map<PlainKey, std::shared_ptr<Primitive>> cache;
  const PlainKey key{m, n, k, lda, ldb, ldc, trans_b, a_unsigned, a_zero != 0};
  std::shared_ptr<Primitive> prim;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (matmul_engine().failed) return false;
    auto it = cache.find(key);
    if (it != cache.end()) {
      prim = it->second;
    } else {
      try {
        prim = make_primitive(m, k, n, lda, ldc, a_unsigned, a_zero != 0, plain_b(k, n, trans_b, ldb));
      } catch (const dnnl::error&) {
        matmul_engine().failed = true;
        return false;
      }
      if (cache.size() >= 4096) cache.clear();  // bounded; a run sees a few hundred shapes at most
      cache.emplace(key, prim);
    }
  }
  const dnnl::memory B(plain_b(k, n, trans_b, ldb), matmul_engine().engine, const_cast<std::int8_t*>(b));
  execute(*prim, m, k, n, a, a_unsigned, lda, a_zero, a_zero != 0, B, c, ldc);
  return true;
}

// Float32 products with the weights as a checkpoint stores them, W [N, K] row-major: the matmul's B
// [K, N] with transposed strides. Its brgemm kernels copy W into their blocked layout as they go and
// run as fast as sgemm on a pre-transposed copy from about 128 rows on (5% slower at 128 rows, 12% at
// 16; sgemm 'N','T' on W was 1.4x slower at 128 rows and 2.6x at 16: AMD EPYC, AVX-512, 2 threads).
// alpha is the output scale, beta = 1 a sum post-op. Primitives cached by shape, as above.
struct F32Key {
  std::int64_t m, n, k, lda, ldc;
  float alpha;
  bool accumulate;
  auto tie() const { return std::tie(m, n, k, lda, ldc, alpha, accumulate); }
  bool operator<(const F32Key& o) const { return tie() < o.tie(); }
};

// Primitives cached by their key, made by `make` on a miss (which may throw). Bounded: a run sees a
// few hundred shapes at most.
template <class Key>
class PrimitiveCache {
 public:
  template <class Make>
  std::shared_ptr<Primitive> get(const Key& key, const Make& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::shared_ptr<Primitive> prim = make();
    if (cache_.size() >= 4096) cache_.clear();
    cache_.emplace(key, prim);
    return prim;
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<Primitive>> cache_;
};

// A matmul with float32 results: alpha the output scale, `accumulate` a sum post-op (C += ...).
// Throws dnnl::error when oneDNN has no implementation.
std::shared_ptr<Primitive> float_result_matmul(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                               const dnnl::memory::desc& c, float alpha, bool accumulate) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, matmul_engine().engine);
  return std::make_shared<Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size()});
}

// True when the product ran (false: no oneDNN matmul for it, the caller falls back).
bool matmul_f32_wt(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* w,
                   float* c, std::int64_t ldc, float alpha, float beta) {
  static PrimitiveCache<F32Key> cache;
  static std::atomic<bool> failed{false};
  if (failed) return false;
  const F32Key key{m, n, k, lda, ldc, alpha, beta != 0.0f};
  const dnnl::memory::desc a_desc({m, k}, dt::f32, {lda, 1}), b_desc({k, n}, dt::f32, {1, k}),
      c_desc({m, n}, dt::f32, {ldc, 1});
  std::shared_ptr<Primitive> prim;
  try {
    prim = cache.get(key, [&] { return float_result_matmul(a_desc, b_desc, c_desc, alpha, key.accumulate); });
  } catch (const dnnl::error&) {
    failed = true;
    return false;
  }
  const dnnl::engine& eng = matmul_engine().engine;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(a_desc, eng, const_cast<float*>(a))},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(b_desc, eng, const_cast<float*>(w))},
                                             {DNNL_ARG_DST, dnnl::memory(c_desc, eng, c)}};
  run_primitive(*prim, args, "float32");
  return true;
}

// bfloat16 products with float32 results (gemm_bf16): A [M, K] and B as the logical [K, N] matrix,
// row-major [K, N] ('N') or the transpose of row-major [N, K] ('T').
struct Bf16Key {
  std::int64_t m, n, k, lda, ldb, ldc;
  char trans_b;
  float alpha;
  auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, trans_b, alpha); }
  bool operator<(const Bf16Key& o) const { return tie() < o.tie(); }
};

void matmul_bf16(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a,
                 std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  static PrimitiveCache<Bf16Key> cache;
  const dnnl::memory::desc a_desc({m, k}, dt::bf16, {lda, 1}),
      b_desc({k, n}, dt::bf16, trans_b == 'N' ? dnnl::memory::dims{ldb, 1} : dnnl::memory::dims{1, ldb}),
      c_desc({m, n}, dt::f32, {ldc, 1});
  std::shared_ptr<Primitive> prim;
  try {
    prim = cache.get(Bf16Key{m, n, k, lda, ldb, ldc, trans_b, alpha},
                     [&] { return float_result_matmul(a_desc, b_desc, c_desc, alpha, false); });
  } catch (const dnnl::error& err) {
    throw std::runtime_error(std::string("oneDNN has no bfloat16 matmul for this shape: ") + err.what());
  }
  const dnnl::engine& eng = matmul_engine().engine;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(a_desc, eng, const_cast<std::uint16_t*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(b_desc, eng, const_cast<std::uint16_t*>(b))},
      {DNNL_ARG_DST, dnnl::memory(c_desc, eng, c)}};
  run_primitive(*prim, args, "bfloat16");
}

}  // namespace

struct PackedS8Weights::Impl {
  std::int64_t n, k;
  const std::int8_t* b;
  bool a_unsigned;
  dnnl::memory packed;  // empty when oneDNN could not pack them
  std::mutex mutex;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::shared_ptr<Primitive>> cache;  // (m, lda, ldc)
};

PackedS8Weights::PackedS8Weights(std::int64_t n, std::int64_t k, const std::int8_t* b, bool a_unsigned)
    : impl_(std::make_unique<Impl>()) {
  impl_->n = n;
  impl_->k = k;
  impl_->b = b;
  impl_->a_unsigned = a_unsigned;
  if (!onednn_int8_exact()) return;  // the exact kernel reads the plain weights
  try {
    // The layout the kernels want, asked of a representative product (256 rows); other row counts
    // take it too, or fall back to the plain weights.
    Engine& e = matmul_engine();
    const dnnl::memory::desc any({k, n}, dt::s8, dnnl::memory::format_tag::any);
    const dnnl::memory::desc a({256, k}, a_unsigned ? dt::u8 : dt::s8, {k, 1});
    const dnnl::memory::desc c({256, n}, dt::s32, {n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (a_unsigned) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, any, c), attr, e.engine);
    impl_->packed = dnnl::memory(pd.weights_desc(), e.engine);
    dnnl::memory plain(plain_b(k, n, 'T', k), e.engine, const_cast<std::int8_t*>(b));
    dnnl::stream stream(e.engine);
    dnnl::reorder(plain, impl_->packed).execute(stream, plain, impl_->packed);
    stream.wait();
  } catch (const dnnl::error&) {
    impl_->packed = dnnl::memory();
  }
}

PackedS8Weights::~PackedS8Weights() = default;

std::size_t PackedS8Weights::bytes() const { return impl_->packed ? impl_->packed.get_desc().get_size() : 0; }

void PackedS8Weights::multiply(std::int64_t m, const void* a, std::int64_t lda, std::int32_t a_zero, std::int32_t* c,
                               std::int64_t ldc) const {
  Impl& w = *impl_;
  std::shared_ptr<Primitive> prim;
  if (w.packed && m > 0) {
    std::lock_guard<std::mutex> lock(w.mutex);
    const auto key = std::make_tuple(m, lda, ldc);
    auto it = w.cache.find(key);
    if (it != w.cache.end()) {
      prim = it->second;
    } else {
      try {
        prim = make_primitive(m, w.k, w.n, lda, ldc, w.a_unsigned, w.a_unsigned, w.packed.get_desc());
      } catch (const dnnl::error&) {
        prim = nullptr;  // this row count does not take the packed layout: plain weights below
      }
      if (w.cache.size() >= 1024) w.cache.clear();
      w.cache.emplace(key, prim);
    }
  }
  if (prim) {
    execute(*prim, m, w.k, w.n, a, w.a_unsigned, lda, a_zero, w.a_unsigned, w.packed, c, ldc);
  } else if (w.a_unsigned) {
    gemm_u8s8s32('T', m, w.n, w.k, static_cast<const std::uint8_t*>(a), lda, static_cast<std::uint8_t>(a_zero), w.b,
                 w.k, c, ldc);
  } else {
    gemm_s8s8s32('T', m, w.n, w.k, static_cast<const std::int8_t*>(a), lda, w.b, w.k, c, ldc);
  }
}

#else

struct PackedS8Weights::Impl {
  std::int64_t n, k;
  const std::int8_t* b;
  bool a_unsigned;
};

PackedS8Weights::PackedS8Weights(std::int64_t n, std::int64_t k, const std::int8_t* b, bool a_unsigned)
    : impl_(std::make_unique<Impl>(Impl{n, k, b, a_unsigned})) {}
PackedS8Weights::~PackedS8Weights() = default;
std::size_t PackedS8Weights::bytes() const { return 0; }

void PackedS8Weights::multiply(std::int64_t m, const void* a, std::int64_t lda, std::int32_t a_zero, std::int32_t* c,
                               std::int64_t ldc) const {
  const Impl& w = *impl_;
  if (w.a_unsigned) {
    gemm_u8s8s32('T', m, w.n, w.k, static_cast<const std::uint8_t*>(a), lda, static_cast<std::uint8_t>(a_zero), w.b,
                 w.k, c, ldc);
  } else {
    gemm_s8s8s32('T', m, w.n, w.k, static_cast<const std::int8_t*>(a), lda, w.b, w.k, c, ldc);
  }
}
#endif

std::string igemm_implementation() {
  // Without VNNI the exact kernel runs every integer product (oneDNN's is never asked).
  if (kCompiled && !onednn_int8_exact()) {
    return "exact AVX2 kernel: int8 row kernel, row groups of 4 (oneDNN's int8 kernels saturate without VNNI)";
  }
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  {
    Engine& e = matmul_engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    if (!e.failed && !e.impl.empty()) return "oneDNN matmul " + e.impl;
    if (!e.failed) return "oneDNN matmul (no product run yet)";
  }
#endif
  return kCompiled ? "oneDNN dnnl_gemm_*" : "C++ loop";
}

void gemm_u8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint8_t* a, std::int64_t lda,
                  std::uint8_t a_zero, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
  if (!have_onednn_igemm()) return exact_igemm(trans_b, m, n, k, a, lda, a_zero, b, ldb, c, ldc);
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  if (matmul_igemm(trans_b, m, n, k, a, true, lda, a_zero, b, ldb, c, ldc)) return;
#endif
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  const std::int32_t co = 0;
  const int status =
      dnnl_gemm_u8s8s32('N', trans_b, 'F', m, n, k, 1.0f, a, lda, a_zero, b, ldb, 0, 0.0f, c, ldc, &co);
  if (status != 0) throw std::runtime_error("dnnl_gemm_u8s8s32 failed with status " + std::to_string(status));
#endif
}

void gemm_s8s8s32(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                  const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
  if (!have_onednn_igemm()) return exact_igemm(trans_b, m, n, k, a, lda, 0, b, ldb, c, ldc);
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  if (matmul_igemm(trans_b, m, n, k, a, false, lda, 0, b, ldb, c, ldc)) return;
#endif
#ifdef EVALRUN_HAVE_ONEDNN_SGEMM
  const std::int32_t co = 0;
  const int status = dnnl_gemm_s8s8s32('N', trans_b, 'F', m, n, k, 1.0f, a, lda, 0, b, ldb, 0, 0.0f, c, ldc, &co);
  if (status != 0) throw std::runtime_error("dnnl_gemm_s8s8s32 failed with status " + std::to_string(status));
#endif
}

void linear_f32(const float* x, std::int64_t m, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t k,
                float* y, std::int64_t ldy, float alpha, float beta) {
  if (m <= 0 || n <= 0) return;
  if (m <= f32_rows_limit() && have_f32_rows_kernel()) return linear_f32_rows(x, m, ldx, w, n, k, y, ldy, alpha, beta);
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  if (have_onednn_sgemm() && matmul_f32_wt(m, n, k, x, ldx, w, y, ldy, alpha, beta)) return;
#endif
  sgemm('N', 'T', m, n, k, alpha, x, ldx, w, k, beta, y, ldy);
}


#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
bool have_bf16_gemm() { return have_native_bf16_gemm(); }
#else
bool have_bf16_gemm() { return false; }
#endif

void gemm_bf16(char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  if (!have_bf16_gemm()) throw std::logic_error("gemm_bf16: no native bfloat16 products on this CPU or build");
  if (m <= 0 || n <= 0) return;
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
  matmul_bf16(trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
#endif
}

}  // namespace evalrun::ops
