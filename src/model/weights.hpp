// What every architecture's loaded state has in common (internal to src/model): where it came from,
// how it computes, how its layers are stored, its tensor-parallel group, and the lists of what it
// holds. Each architecture's Impl derives from Weights and lists its projections (slots) and its
// other tensors once; Model's linear sites, quantization, compute dtype and weight bytes are answered
// from those lists for every architecture alike (model.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "model/linear_slots.hpp"
#include "model/model.hpp"
#include "quant/quant_config.hpp"

namespace evalrun::model {

struct Weights {
  std::string dir;  // the checkpoint directory
  DType dtype = DType::fp32;  // as requested
  // The compute dtype: float32, bfloat16 for a bf16 run, float16 for an fp16 run off the host (on
  // the host an fp16 run keeps float16-rounded weights and computes in float32: this libtorch has no
  // float16 matrix product on the CPU).
  at::ScalarType st = at::kFloat;
  // Where every tensor of the model lives and computes (ModelLoad::device). The loaders read the
  // checkpoint on the host; finish_load moves what the forward pass uses there.
  at::Device device{at::kCPU};
  std::function<void()> device_sync;  // ModelLoad::device_sync
  // The raw-buffer float32 path (fixed at load): oneDNN's sgemm, or a quantized model. Host only;
  // everything else runs on the torch path, whose tensors sit on `device`.
  bool use_sgemm = false;
  quant::QuantConfig quant;  // how the checkpoint's layers are stored (method none: float)
  Communicator* tp = nullptr;  // this rank's tensor-parallel group (null: the whole model)

  virtual ~Weights() = default;

  // The start of every architecture's load: malloc tuned once, the checkpoint's quantization read and
  // checked against the run (check_quantization in loader_util.hpp), and the compute path chosen.
  void begin_load(const ModelLoad& how);
  bool split() const;  // a tensor-parallel group of more than one rank
  bool on_host() const { return device.is_cpu(); }
  // Options for a tensor of the compute dtype (or `dtype`) on the model's device.
  at::TensorOptions on_device() const;
  at::TensorOptions on_device(at::ScalarType dtype) const;
  // The end of every architecture's load: off the host, moves tensors() and the layers of slots() to
  // `device` once (a tensor listed twice, a tied head, stays one tensor). GPTQ layers become float
  // layers there, dequantized once (W4A16 as dequantize-then-matmul; their kernels read host memory),
  // stored W^T when `transposed` (the model's float layout, LinearLoad::transposed).
  void finish_load(bool transposed);
  // The tensor-parallel sum of a partial product (of any dtype, on `device`), summed in float32 (MPI
  // has no bfloat16 or float16): in device memory when device_sync is set, else through the host.
  at::Tensor summed(const at::Tensor& partial) const;

  // Every projection the forward pass calls, as slots pointing at the layer pointers.
  virtual std::vector<LinearSlot> slots() = 0;
  // Every other tensor held (embeddings, norms, heads); undefined ones and ones listed twice (a tied
  // head) are counted once or not at all.
  virtual std::vector<at::Tensor*> tensors() = 0;
  // Bytes held by layers outside slots() and tensors() (a quantized lm_head).
  virtual std::size_t other_bytes() const { return 0; }
};

}  // namespace evalrun::model
