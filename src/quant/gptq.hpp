// GPTQ W4A16 (AutoGPTQ / Hugging Face checkpoints): packed 4-bit weights with a float16 scale and a
// 4-bit zero point per (group of input rows, output column).
//
// Checkpoint tensors of a layer with in inputs and out outputs, G groups (G = ceil(in / group_size),
// 1 for group_size -1):
//   prefix.qweight I32 [in/8, out]   q[i, o] = (qweight[i/8, o] >> 4*(i%8)) & 15
//   prefix.qzeros  I32 [G, out/8]    z[g, o] = (qzeros[g, o/8] >> 4*(o%8)) & 15, + 1 in the v1 format
//   prefix.scales  F16 [G, out]      (F32 accepted)
//   prefix.g_idx   I32 [in]          group of input row i (optional without desc_act: i / group_size)
//   prefix.bias    [out]             optional
//   W[o, i] = scale[g_idx[i], o] * (q[i, o] - z[g_idx[i], o])
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "quant/linear.hpp"

namespace evalrun::quant {

struct GptqSettings {
  int bits = 4;
  std::int64_t group_size = 128;  // -1: one group over all inputs
  bool sym = true;
  bool desc_act = false;  // act-order: g_idx is not i / group_size
  bool v2 = false;        // checkpoint_format "gptq_v2": zero points stored as they are ("gptq": minus one)

  // "gptq w4 g32 asym act_order" ("gptq_v2 ..." for the v2 format).
  std::string describe() const;
  // The quantization_config / quantize_config.json object AutoGPTQ writes for these settings.
  nlohmann::ordered_json to_json() const;
};

// Validates the checkpoint's quantization settings (`where` names the file and key for errors):
// bits 4 only; group_size -1 or > 0; checkpoint_format (or "format") "gptq" / "gptq_v2" only (marlin,
// awq, ... and is_marlin_format are refused); a quantized lm_head is refused.
GptqSettings parse_gptq_settings(const nlohmann::json& settings, const std::string& where);

// G = the number of groups of a layer with `in` inputs.
std::int64_t gptq_groups(std::int64_t in, std::int64_t group_size);

// One layer's tensors as a checkpoint stores them (row-major, the shapes above).
struct GptqTensors {
  std::int64_t in = 0, out = 0;
  std::vector<std::int32_t> qweight;     // [in/8, out]
  std::vector<std::int32_t> qzeros;      // [G, out/8]
  std::vector<std::uint16_t> scales_f16; // [G, out] float16 bits; or
  std::vector<float> scales_f32;         // [G, out] when the checkpoint stores F32 scales
  std::vector<std::int32_t> g_idx;       // [in]; empty: i / group_size
  std::int64_t groups = 0;               // G; 0: gptq_groups(in, group_size). A row-parallel part of an
                                         // act-order layer keeps every group of the whole layer.
  std::vector<float> bias;               // [out]; empty: none
};

// The layer for these tensors. Checks sizes, the g_idx range and finite scales (InputError
// "where: tensor 'prefix.g_idx'"). Weights stay packed (4 bits); rows are regrouped so that each group is
// contiguous (act-order: x's columns are permuted at run time), zero points stay 4-bit, scales stay
// float16 (float32 scales are kept as float32 unless every one is exactly a float16).
LinearPtr make_gptq_linear(const GptqTensors& tensors, const GptqSettings& settings, const std::string& where,
                           const std::string& prefix);

// Loads the layer stored under `prefix` (e.g. "model.layers.0.self_attn.q_proj"), checking every
// tensor's dtype and shape against in / out (InputError naming the tensor); adds the names it read
// to `used`. With a shard, only this tensor-parallel rank's part is read: a column-parallel part must
// start and end on a multiple of 8 outputs (8 zero points per int32); a row-parallel part on a
// multiple of 8 inputs and, unless the layer is act-order, on group boundaries (its scales and zero
// points are then the groups of its rows; an act-order part keeps all groups, since its rows belong to
// any of them). InputError naming the tensor and the split otherwise.
LinearPtr load_gptq_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                           const GptqSettings& settings, std::set<std::string>& used,
                           const Shard& shard = Shard::whole());

// Round-to-nearest quantization of a float weight w [out, in] (row-major) per (output, group), for
// make-model and tests: asymmetric min/max (scale = (max - min) / 15, zero = round(-min / scale)) or
// symmetric (scale = 2 max|w| / 15, zero 8); scales rounded to float16 before the weights are
// rounded with them. g_idx: the group of each input (empty: i / group_size); act-order checkpoints
// pass a permuted one.
GptqTensors gptq_quantize_rtn(const float* w, std::int64_t out, std::int64_t in, const GptqSettings& settings,
                              const std::vector<std::int32_t>& g_idx);

// float16 bits <-> float (round to nearest even; used by make-model and tests).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);

}  // namespace evalrun::quant
