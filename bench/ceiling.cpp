#include "ceiling.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "model/loader_util.hpp"
#include "ops/bf16_rows.hpp"
#include "ops/gemm.hpp"

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
#include <dnnl.hpp>
#endif

namespace evalrun::bench {
namespace {

double best_seconds(const std::function<void()>& f, int reps) {
  f();  // warm-up: first touch of the output, oneDNN kernel generation
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
// C[M, N] = A[M, K] B[K, N] on oneDNN's matmul primitive, B in the layout the primitive picks. The
// buffers hold a byte pattern (0x11: small normal floats, small integers): the values do not change
// the time of these kernels.
KernelTime onednn_matmul(dnnl::memory::data_type src, dnnl::memory::data_type dst, std::int64_t M, std::int64_t K,
                         std::int64_t N, int reps) {
  using dnnl::memory;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::desc a({M, K}, src, memory::format_tag::ab), c({M, N}, dst, memory::format_tag::ab);
  const memory::desc b_any({K, N}, src == memory::data_type::u8 ? memory::data_type::s8 : src,
                           memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), eng);
  memory A(a, eng), B(pd.weights_desc(), eng), C(c, eng);
  std::memset(A.get_data_handle(), 0x11, a.get_size());
  std::memset(B.get_data_handle(), 0x11, pd.weights_desc().get_size());
  const dnnl::matmul prim(pd);
  KernelTime t;
  t.impl = pd.impl_info_str();
  t.seconds = best_seconds(
      [&] {
        prim.execute(stream, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
        stream.wait();
      },
      reps);
  return t;
}
#endif

}  // namespace

LayerCeilings measure_layer_ceilings(std::int64_t M, std::int64_t H, std::int64_t I, int reps) {
  torch::InferenceMode guard;
  struct Shape {
    std::int64_t k, n;
  };
  const Shape shapes[] = {{H, 3 * H}, {H, H}, {H, I}, {I, H}};
  LayerCeilings out;
  // Per precision, the sum over the shapes of the fastest kernel's time.
  std::map<std::string, double> fastest_sum;
  for (const Shape& s : shapes) {
    out.layer_ops += 2.0 * M * s.k * s.n;
    std::map<std::string, double> fastest;
    auto add = [&](const std::string& precision, const std::string& kernel, KernelTime t) {
      t.kernel = precision + " " + kernel;
      t.k = s.k;
      t.n = s.n;
      out.kernels.push_back(t);
      auto [it, fresh] = fastest.emplace(precision, t.seconds);
      if (!fresh) it->second = std::min(it->second, t.seconds);
    };
    torch::Tensor x = torch::randn({M, s.k}), w = torch::randn({s.n, s.k}), b = torch::randn({s.n});
    torch::Tensor w_t = w.t().contiguous(), y = torch::empty({M, s.n});
    add("fp32", "at::linear", {"", "", 0, 0, best_seconds([&] { at::linear(x, w, b); }, reps)});
    add("fp32", "model GEMM", {"", "", 0, 0, best_seconds([&] { model::matmul_into(y, x, w_t, 0.0f); }, reps)});
    torch::Tensor xb = x.to(torch::kBFloat16), wb = w.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
    torch::Tensor wb_t = wb.t().contiguous(), yb = torch::empty({M, s.n}, torch::kBFloat16);
    add("bf16", "model GEMM", {"", "", 0, 0, best_seconds([&] { model::matmul_into(yb, xb, wb_t, 0.0f); }, reps)});
    // Without AVX512-BF16 libtorch's and oneDNN's bfloat16 products are a scalar loop (at::linear,
    // ~1.5 GFLOP/s: minutes at these shapes) or refused (oneDNN's matmul), so they are left out.
    const bool native_bf16 = ops::have_native_bf16_gemm();
    if (native_bf16) add("bf16", "at::linear", {"", "", 0, 0, best_seconds([&] { at::linear(xb, wb, bb); }, reps)});
#ifdef EVALRUN_HAVE_ONEDNN_MATMUL
    using dt = dnnl::memory::data_type;
    add("fp32", "oneDNN matmul", onednn_matmul(dt::f32, dt::f32, M, s.k, s.n, reps));
    if (native_bf16) add("bf16", "oneDNN matmul", onednn_matmul(dt::bf16, dt::bf16, M, s.k, s.n, reps));
    // Without VNNI oneDNN's integer kernels saturate (ops/gemm.hpp): not a primitive an exact INT8 run
    // can use, so there the exact GEMM below is the ceiling.
    if (ops::have_onednn_igemm()) {
      add("int8", "oneDNN matmul s8s8s32", onednn_matmul(dt::s8, dt::s32, M, s.k, s.n, reps));
      add("int8", "oneDNN matmul u8s8s32", onednn_matmul(dt::u8, dt::s32, M, s.k, s.n, reps));
    }
#endif
    if (!ops::have_onednn_igemm()) {
      std::vector<std::uint8_t> a8(static_cast<std::size_t>(M * s.k), 0x11);
      std::vector<std::int8_t> b8(static_cast<std::size_t>(s.n * s.k), 0x11);
      std::vector<std::int32_t> c32(static_cast<std::size_t>(M * s.n));
      add("int8", "model GEMM (exact)", {"", ops::igemm_implementation(), 0, 0, best_seconds([&] {
                                           ops::gemm_u8s8s32('T', M, s.n, s.k, a8.data(), s.k, 128, b8.data(), s.k,
                                                             c32.data(), s.n);
                                         }, reps)});
    }
    for (const auto& [precision, seconds] : fastest) fastest_sum[precision] += seconds;
  }
  auto rate = [&](const char* precision) {
    auto it = fastest_sum.find(precision);
    return it == fastest_sum.end() ? 0.0 : out.layer_ops / it->second;
  };
  out.fp32 = rate("fp32");
  out.bf16 = rate("bf16");
  out.int8 = rate("int8");
  return out;
}

}  // namespace evalrun::bench
