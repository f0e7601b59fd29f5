// GEMM ceiling for the RoBERTa forward benchmark: GFLOP/s of the products a roberta-base layer does
// at batch 8 x 384 (M = 3072; K x N = 768 x 2304 fused QKV, 768 x 768, 768 x 3072, 3072 x 768),
// float32 and bfloat16, with the same thread count as the forward benchmark.
//   gemm_ceiling [threads=2] [reps=5]
// Prints one line per (kernel, shape) and a summary: the FLOP-weighted ceiling per dtype is the
// best kernel's time over the four shapes of one layer.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "model/loader_util.hpp"
#include "ops/gemm.hpp"

namespace {

double seconds(const std::function<void()>& f, int reps) {
  f();  // warm-up (first-touch of the output, oneDNN kernel generation)
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  torch::set_num_threads(threads);
  torch::InferenceMode guard;
  const std::int64_t M = 8 * 384;
  struct Shape { std::int64_t k, n; };
  const Shape shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::printf("threads %d, M %lld, best of %d; oneDNN sgemm %s\n", threads, static_cast<long long>(M), reps,
              evalrun::ops::have_onednn_sgemm() ? "linked" : "not linked");

  double layer_flop = 0, t_linear32 = 0, t_sgemm = 0, t_linear16 = 0;
  for (const Shape& s : shapes) {
    const double flop = 2.0 * M * s.k * s.n;
    layer_flop += flop;
    torch::Tensor x = torch::randn({M, s.k}), w = torch::randn({s.n, s.k}), b = torch::randn({s.n});
    torch::Tensor w_t = w.t().contiguous(), y = torch::empty({M, s.n});
    const double a = seconds([&] { at::linear(x, w, b); }, reps);
    const double g = seconds([&] { evalrun::model::matmul_into(y, x, w_t, 0.0f); }, reps);
    torch::Tensor xb = x.to(torch::kBFloat16), wb = w.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
    const double h = seconds([&] { at::linear(xb, wb, bb); }, reps);
    std::printf("K %5lld N %5lld  fp32 at::linear %7.1f GFLOP/s | fp32 model GEMM %7.1f GFLOP/s | bf16 at::linear %7.1f GFLOP/s\n",
                static_cast<long long>(s.k), static_cast<long long>(s.n), flop / a / 1e9, flop / g / 1e9,
                flop / h / 1e9);
    t_linear32 += a;
    t_sgemm += g;
    t_linear16 += h;
  }
  // One layer does the 768x768 product once (attention output), the others once each.
  std::printf("layer mix: fp32 at::linear %.1f, fp32 model GEMM %.1f, bf16 at::linear %.1f GFLOP/s\n",
              layer_flop / t_linear32 / 1e9, layer_flop / t_sgemm / 1e9, layer_flop / t_linear16 / 1e9);
  std::printf("ceiling fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", layer_flop / std::min(t_linear32, t_sgemm) / 1e9,
              layer_flop / t_linear16 / 1e9);
  return 0;
}
