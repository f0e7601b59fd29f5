// The GEMM ceilings of an encoder layer, measured with the fastest primitive this machine has for each
// precision: the products one post-LayerNorm layer runs at M rows (hidden H, intermediate I: fused QKV
// H x 3H, attention output H x H, intermediate H x I, output I x H), timed on
//   fp32: the model's own GEMM (oneDNN sgemm), at::linear and oneDNN's matmul primitive;
//   bf16: the model's own GEMM (float32 tiles on CPUs without AVX512-BF16), and where the CPU has
//         AVX512-BF16 at::linear and oneDNN's matmul primitive (bf16 in, bf16 out, f32 accumulation);
//   int8: oneDNN's matmul primitive, s8 x s8 -> s32 (VNNI / AMX where the CPU has them); without VNNI,
//         where oneDNN's integer kernels saturate, the model's exact GEMM (ops::gemm_u8s8s32).
// Weights of the matmul primitive are in the layout it asks for, reordered once (as the models hold
// them). The ceiling of a precision is the layer's operations over the sum of the fastest kernel's
// time per shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace evalrun::bench {

struct KernelTime {
  std::string kernel;  // "fp32 model GEMM", "bf16 oneDNN matmul", ...
  std::string impl;    // oneDNN's implementation name, when known
  std::int64_t k = 0, n = 0;
  double seconds = 0;  // best of the repetitions
};

struct LayerCeilings {
  double layer_ops = 0;            // multiply-adds x 2 of one layer's four products
  double fp32 = 0, bf16 = 0, int8 = 0;  // operations per second (0: not measured here)
  std::vector<KernelTime> kernels;   // every (kernel, shape) measured
};

// Runs every kernel on the four shapes (after one warm-up each), best of `reps`. Threads: the
// caller's setting (torch / OpenMP).
LayerCeilings measure_layer_ceilings(std::int64_t M, std::int64_t H, std::int64_t I, int reps);

}  // namespace evalrun::bench
