// GEMM ceiling for the RoBERTa forward benchmark: the products a roberta-base layer does at batch 8 x
// 384 (M = 3072; K x N = 768 x 2304 fused QKV, 768 x 768, 768 x 3072, 3072 x 768) in float32,
// bfloat16 and int8, on every kernel bench/ceiling.hpp lists, with the same thread count as the
// forward benchmark.
//   gemm_ceiling [threads=2] [reps=5]
// Prints one line per (kernel, shape) and a summary: the ceiling per precision is one layer's
// operations over the fastest kernel's time summed over the four shapes.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "ceiling.hpp"
#include "ops/gemm.hpp"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  torch::set_num_threads(threads);
  const std::int64_t M = 8 * 384;
  std::printf("threads %d, M %lld, best of %d; oneDNN sgemm %s\n", threads, static_cast<long long>(M), reps,
              evalrun::ops::have_onednn_sgemm() ? "linked" : "not linked");
  const auto c = evalrun::bench::measure_layer_ceilings(M, 768, 3072, reps);
  for (const auto& k : c.kernels) {
    std::printf("K %5lld N %5lld  %-28s %8.1f G/s  %s\n", static_cast<long long>(k.k), static_cast<long long>(k.n),
                k.kernel.c_str(), 2.0 * M * k.k * k.n / k.seconds / 1e9, k.impl.c_str());
  }
  // bench/roberta_squad.sh reads this line.
  std::printf("ceiling fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s, int8 %.1f GOP/s\n", c.fp32 / 1e9, c.bf16 / 1e9,
              c.int8 / 1e9);
  return 0;
}
