// FP8: float8 e4m3 weights with float32 scales (the "fp8" quantization_config of vLLM / Hugging Face
// checkpoints, e.g. those written by llm-compressor or AutoFP8), run on CPUs without float8 hardware.
//
// config.json quantization_config: {"quant_method": "fp8", "activation_scheme": "dynamic" | "static"}
// ("fmt": "e4m3" and "ignored_layers" / "modules_to_not_convert" accepted; block-wise scales,
// "weight_block_size", are refused). Per layer:
//   prefix.weight        F8_E4M3 [out, in]
//   prefix.weight_scale  F32 [] or [1] (per tensor), or [out] / [out, 1] (per output channel)
//   prefix.input_scale   F32 [] or [1]: static activation scale (required with "static")
//   prefix.bias          [out], optional
//   W[o, i] = e4m3(weight[o, i]) * weight_scale[o]
// Activations are quantized too, as an FP8 engine would, and computed in float32 (emulation): static:
// x -> e4m3(x / input_scale) * input_scale; dynamic: the same per token with scale max|x_row| / 448.
// e4m3 rounding is to nearest even and saturates at +-448. The products: a decode step's 1-8 rows on
// ops::linear_fp8_rows (the codes streamed and decoded in registers), more rows on 64-row tiles
// decoded to float32 and sgemm.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "quant/linear.hpp"

namespace evalrun::quant {

struct Fp8Settings {
  bool static_activations = false;  // activation_scheme "static": each layer has an input_scale
  // "fp8 e4m3 dynamic" / "fp8 e4m3 static".
  std::string describe() const;
  nlohmann::ordered_json to_json() const;
};

// Validates the checkpoint's quantization settings (`where` names the file and key for errors).
Fp8Settings parse_fp8_settings(const nlohmann::json& settings, const std::string& where);

// e4m3 (bias 7, no infinities): sign, 4 exponent bits, 3 mantissa bits; exponent 0 is subnormal
// (m / 8 * 2^-6); 0x7F and 0xFF are NaN. Largest finite 448 (0x7E).
float e4m3_to_float(std::uint8_t code);
// Round to nearest even; saturates to +-448; NaN -> 0x7F.
std::uint8_t float_to_e4m3(float value);
// The float value of float_to_e4m3(value) (NaN stays NaN), computed without the code.
float round_to_e4m3(float value);

// One layer's tensors as a checkpoint stores them.
struct Fp8Tensors {
  std::int64_t in = 0, out = 0;
  std::vector<std::uint8_t> weight;  // [out, in] e4m3 codes
  std::vector<float> weight_scale;   // 1 (per tensor) or out (per channel)
  float input_scale = 0.0f;          // > 0: static activation scale; 0: none
  std::vector<float> bias;           // [out] or empty
};

// The layer (weights stay 1 byte each). Checks sizes, NaN codes and scales (InputError "where:
// tensor 'prefix.weight'").
LinearPtr make_fp8_linear(const Fp8Tensors& tensors, const Fp8Settings& settings, const std::string& where,
                          const std::string& prefix);

// Loads the layer stored under `prefix` (e.g. "model.layers.0.self_attn.q_proj"), checking every
// tensor's dtype and shape against in / out (InputError naming the tensor); adds the names it read
// to `used`.
LinearPtr load_fp8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                          const Fp8Settings& settings, std::set<std::string>& used,
                          const Shard& shard = Shard::whole());

// Quantizes a float weight [out, in] (make-model, tests): scale = max|w| / 448 per tensor or per
// output row (1 when all zero), codes = e4m3(w / scale).
Fp8Tensors fp8_quantize(const float* w, std::int64_t out, std::int64_t in, bool per_channel);

}  // namespace evalrun::quant
