// Linear: one projection y = x W^T + b over float32 activation rows, whatever the weights are stored
// as (float, GPTQ 4-bit, INT8, FP8). The models hold every projection of their layers as a Linear, so
// a quantization format is one implementation of this interface (src/quant) and the models do not
// know which one they run. Plain C++: no torch in this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace evalrun {
class Communicator;
}

namespace evalrun::quant {

class Linear {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features) : in_(in_features), out_(out_features) {}
  virtual ~Linear() = default;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  // For m in [0, M): y[m, 0:out] = beta * y[m, 0:out] + alpha * (x[m, 0:in] W^T + b).
  // x has row stride ldx, y row stride ldy (y may be a column slice of a wider buffer); beta is 0 or 1.
  // Not thread-safe: implementations keep scratch buffers. They parallelise inside (torch's pool).
  virtual void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                       float beta) = 0;

  // The weight this layer computes with, as float32 W [out, in] row-major (dequantized exactly).
  virtual std::vector<float> weight_f32() const = 0;
  // The bias [out], or empty when the layer has none.
  virtual std::vector<float> bias_f32() const = 0;
  // Bytes this layer holds for weights, scales, zero points and bias.
  virtual std::size_t resident_bytes() const = 0;
  // One line for logs and result files, e.g. "float32", "gptq w4 g32 asym act_order".
  virtual std::string describe() const = 0;
  // The checkpoint tensors that store this layer under `prefix` (e.g. prefix + ".qweight"), in the
  // format its loader reads back.
  virtual void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const = 0;
  // This layer is a row-parallel part (Shard::Split::in) of a layer split over `group`: each rank
  // holds some columns of a row of x. Layers that scale activations per row at run time (dynamic
  // INT8 / FP8) then take each row's max |x| over the whole group, so a split layer rounds exactly as
  // the whole one does. Others need nothing.
  virtual void set_row_group(Communicator* group) { (void)group; }

 private:
  std::int64_t in_, out_;
};

using LinearPtr = std::unique_ptr<Linear>;

// The part of a layer one tensor-parallel rank holds. Column-parallel (split out): output features
// [begin, end); the rank computes those outputs in full. Row-parallel (split in): input features
// [begin, end); the rank computes a partial sum of every output, which the ranks then add up, so the
// bias belongs to one rank only (add_bias). Split none: the whole layer.
struct Shard {
  enum class Split { none, out, in };
  Split split = Split::none;
  std::int64_t begin = 0, end = 0;
  bool add_bias = true;

  static Shard whole() { return {}; }
  static Shard columns(std::int64_t begin, std::int64_t end) { return {Split::out, begin, end, true}; }
  static Shard rows(std::int64_t begin, std::int64_t end, bool add_bias) { return {Split::in, begin, end, add_bias}; }
  // The layer's local features: (in, out) of the part this rank holds.
  std::int64_t local_in(std::int64_t in) const { return split == Split::in ? end - begin : in; }
  std::int64_t local_out(std::int64_t out) const { return split == Split::out ? end - begin : out; }
};

// Where a model calls a Linear: the checkpoint layers it holds side by side (e.g. the prefixes of
// q_proj, k_proj and v_proj) and the outputs of each.
struct LinearSite {
  std::vector<std::string> prefixes;
  std::vector<std::int64_t> part_out;
  Linear* layer = nullptr;
};

// Several layers over the same input whose outputs sit side by side (q | k | v, gate | up): one
// Linear with out = the sum. Parts must share in_features.
LinearPtr concat_outputs(std::vector<LinearPtr> parts);

}  // namespace evalrun::quant
