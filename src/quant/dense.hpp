// DenseLinear: float weights held as a torch tensor (float32, or bfloat16 / float16 for the torch compute
// path, on the model's device),
// the layer every unquantized checkpoint loads into. Internal to the model and quant libraries.
#pragma once

#include <torch/torch.h>

#include "quant/linear.hpp"

namespace evalrun::quant {

class DenseLinear final : public Linear {
 public:
  // weight [out, in] and bias [out] (undefined tensor: none), already in the compute dtype.
  // transposed = true stores W^T [in, out] (forward: one row-major sgemm, the encoders' layout);
  // false keeps [out, in] (forward: ops::linear_f32, whose decode-step row kernel streams this
  // layout at memory speed; at::linear reads it fastest too).
  DenseLinear(const torch::Tensor& weight, const torch::Tensor& bias, bool transposed);

  const torch::Tensor& weight() const { return weight_; }  // [in, out] if transposed() else [out, in]
  const torch::Tensor& bias() const { return bias_; }      // undefined when none
  bool transposed() const { return transposed_; }

  // Moves the weight and bias to `device` (the model's, off the host: the torch path then multiplies
  // there; forward() below reads host memory and is not called).
  void move_to(const torch::Device& device);

  // Float32 storage only (the float32 fast path); the torch path uses weight() directly.
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override;
  std::vector<float> weight_f32() const override;
  std::vector<float> bias_f32() const override;
  std::size_t resident_bytes() const override;
  std::string describe() const override;
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override;

 private:
  torch::Tensor weight_, bias_;
  bool transposed_;
};

// A float layer holding `layer`'s exact float32 weights (dequantized, for a quantized one) as `dtype` on
// `device`, stored W^T when `transposed`: how GPTQ runs off the host, whose packed kernels read host
// memory (Weights::finish_load).
LinearPtr dequantized(const Linear& layer, torch::ScalarType dtype, const torch::Device& device, bool transposed);

// The DenseLinear inside `layer` (InputError-free: throws std::logic_error when the layer is
// quantized, which the loaders rule out before the torch path runs).
const DenseLinear& as_dense(const Linear& layer);
DenseLinear& as_dense(Linear& layer);

}  // namespace evalrun::quant
