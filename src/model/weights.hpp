// What every architecture's loaded state has in common (internal to src/model): where it came from,
// how it computes, how its layers are stored, its tensor-parallel group, and the lists of what it
// holds. Each architecture's Impl derives from Weights and lists its projections (slots) and its
// other tensors once; Model's linear sites, quantization, compute dtype and weight bytes are answered
// from those lists for every architecture alike (model.cpp).
#pragma once

#include <ATen/core/Tensor.h>

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
  at::ScalarType st = at::kFloat;  // the compute dtype: float32, or bfloat16 for a bf16 run
  // The raw-buffer float32 path (fixed at load): oneDNN's sgemm, or a quantized model.
  bool use_sgemm = false;
  quant::QuantConfig quant;  // how the checkpoint's layers are stored (method none: float)
  Communicator* tp = nullptr;  // this rank's tensor-parallel group (null: the whole model)

  virtual ~Weights() = default;

  // The start of every architecture's load: malloc tuned once, the checkpoint's quantization read and
  // checked against the run (check_quantization in loader_util.hpp), and the compute path chosen.
  void begin_load(const ModelLoad& how);
  bool split() const;  // a tensor-parallel group of more than one rank

  // Every projection the forward pass calls, as slots pointing at the layer pointers.
  virtual std::vector<LinearSlot> slots() = 0;
  // Every other tensor held (embeddings, norms, heads); undefined ones and ones listed twice (a tied
  // head) are counted once or not at all.
  virtual std::vector<const at::Tensor*> tensors() const = 0;
  // Bytes held by layers outside slots() and tensors() (a quantized lm_head).
  virtual std::size_t other_bytes() const { return 0; }
};

}  // namespace evalrun::model
