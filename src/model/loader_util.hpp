// Helpers shared by the model loaders and forward passes, internal to src/model: config.json field
// readers, checkpoint tensors copied into torch tensors with shape and dtype checks, growable work
// buffers, and the malloc tuning that keeps big buffers from being faulted in again on every call.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "model/model.hpp"
#include "ops/bf16_rows.hpp"
#include "io/safetensors.hpp"
#include "quant/linear.hpp"
#include "quant/quant_config.hpp"

namespace evalrun::model {

// "[2, 3]"
std::string shape_string(const std::vector<std::int64_t>& shape);

// Raises glibc's mmap threshold to its maximum (32 MiB) and the trim threshold to 1 GiB, once per
// process: freed buffers are then reused instead of being unmapped and faulted in again (~11 us per
// first-touched 4 KiB page on these VMs).
void tune_malloc_once();

// A flat buffer handed out as views of the size asked for; grows, never shrinks. `options`: dtype
// and device (a bare dtype: on the host).
struct Workspace {
  torch::Tensor storage;
  torch::Tensor get(const std::vector<std::int64_t>& shape, const torch::TensorOptions& options);
};

// The values of a tensor of any dtype on any device, as host float32 (outputs leave the device here).
std::vector<float> host_floats(const torch::Tensor& t);

// An int64 host array (ids, positions, masks) as a tensor of `shape` on `device`: a view of the
// caller's memory on the host (valid while it is), a copy elsewhere.
torch::Tensor int64_on(const std::int64_t* p, const std::vector<std::int64_t>& shape, const torch::Device& device);

// w.t() made contiguous: [out, in] -> [in, out], so a linear layer is one row-major GEMM.
torch::Tensor pre_transposed(const torch::Tensor& w);

// Elements [begin, end) of dimension `dim` of a tensor (a tensor-parallel rank's part); dim -1: all.
struct TensorPart {
  int dim = -1;
  std::int64_t begin = 0, end = 0;
  bool whole() const { return dim < 0; }
};

// Copies tensor `name` out of the checkpoint (F32 / F16 / BF16) as a contiguous tensor of `target`
// dtype, after checking that its shape is `shape` (InputError naming the file, tensor and shapes).
// round_to_half: round to float16 first (the precision of an fp16 run whose compute is float32).
// With a part, only that part is read (and returned).
torch::Tensor read_tensor(const Checkpoint& ckpt, const std::string& name, const std::vector<std::int64_t>& shape,
                          torch::ScalarType target, bool round_to_half, const TensorPart& part = {});

// y[M,N] = beta * y + x[M,K] @ w_t[K,N]. All three contiguous, same dtype; w_t is the
// pre-transposed weight. beta is 0 or 1. Float32 goes to oneDNN's sgemm when available, bfloat16 to
// linear_bf16 (below).
void matmul_into(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w_t, float beta);

// The one place that routes a bfloat16 product y[M,N] = x[M,K] W (+ bias) (+ beta y), W stored [N,K]
// (Bf16Layout::out_in) or [K,N] (in_out), all contiguous bfloat16 (bias may be undefined): decode steps
// (at most ops::kBf16RowsMax rows of an out_in weight, beta 0) to ops/bf16_rows.hpp's row kernel, which
// streams the weights at memory speed; more rows to float32 tiles and the float32 GEMM where the CPU
// lacks AVX512-BF16 (libtorch's bfloat16 GEMM is a scalar loop there). Returns false, computing
// nothing, where the CPU's native bfloat16 GEMM serves the product better (the caller's at::linear /
// at::mm). Every route accumulates in float32 and rounds once to bfloat16.
bool linear_bf16(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w, ops::Bf16Layout layout,
                 const torch::Tensor& bias, float beta);

// The same product for the raw-buffer bfloat16 path, whose activations are float32 buffers holding
// bfloat16 values: y[m, :] = bf16(x[m, :] W^T + bias) for m rows of x (row stride ldx, rounded to
// bfloat16 on the way in, which keeps bfloat16 values) into rows of y (stride ldy) as float32. W [n, k]
// and bias (or undefined) bfloat16 on the host; linear_bf16's routes, or the native bfloat16 GEMM.
void linear_bf16_floats(const float* x, std::int64_t m, std::int64_t ldx, const torch::Tensor& w,
                        const torch::Tensor& bias, float* y, std::int64_t ldy);

// at::matmul, except that bfloat16 operands on the host are multiplied in float32 and the product
// rounded once to bfloat16: torch 2.x's arithmetic (float32 accumulation, one rounding). libtorch
// 1.13's bfloat16 matmul is a scalar loop on CPUs without AVX512-BF16 and, on CPUs with it, does not
// round like that (the Bf16Path test: 29-59% of a decoder's logits bit-identical to the float32-once
// products). For the attention products of the torch path.
torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b);

// How the linear layers of a checkpoint are read.
struct LinearLoad {
  const Checkpoint& ckpt;
  const quant::QuantConfig& quant;  // method none: float layers
  torch::ScalarType dense_dtype;    // float layers: the compute dtype
  bool round_to_half;               // float layers of an fp16 run
  bool transposed;                  // float layers: store W^T (see quant::DenseLinear)
  std::set<std::string>& used;      // every tensor name read is added
  bool conv1d = false;              // GPT-2's Conv1D: prefix.weight is stored [in, out]
};

// The projection stored under `prefix` (prefix.weight [out, in] and, when `bias`, prefix.bias [out]
// for a float layer; the method's tensors for a quantized one). A layer of a quantized checkpoint that
// holds a float prefix.weight instead (a layer the quantizer skipped) loads as a float layer.
// With a shard, only this rank's part of the layer is read (quant::Shard). how.conv1d: the weight is
// stored [in, out] and transposed at load; a quantized Conv1D layer is an InputError.
quant::LinearPtr load_linear(const LinearLoad& how, const std::string& prefix, std::int64_t in, std::int64_t out,
                             bool bias, const quant::Shard& shard = quant::Shard::whole());

// Compares the run's [quantization] method ("auto" accepts whatever the checkpoint holds) with the
// checkpoint's (InputError naming quantization.method), and refuses a quantized checkpoint with a
// bfloat16 run on the host (quantized layers take float32 activations; InputError naming model.dtype).
// Off the host (`host` false) only GPTQ runs, dequantized at load (Weights::finish_load): INT8 and FP8
// are an InputError naming quantization.method.
void check_quantization(const quant::QuantConfig& found, const std::string& expected_method, DType dtype, bool host);

// config.json: parsed object (InputError naming the file when missing, not JSON or not an object).
nlohmann::json read_config_json(const std::string& path);
// Typed fields; errors are InputErrors naming "path: key". A missing or null key gives `fallback`
// (or an error when required).
std::int64_t json_int(const nlohmann::json& j, const std::string& path, const char* key, bool required,
                      std::int64_t fallback, std::int64_t min_value);
std::string json_string(const nlohmann::json& j, const std::string& path, const char* key,
                        const std::string& fallback);
double json_number(const nlohmann::json& j, const std::string& path, const char* key, double fallback);
bool json_bool(const nlohmann::json& j, const std::string& path, const char* key, bool fallback);

}  // namespace evalrun::model
