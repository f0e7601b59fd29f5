// Quantized versions of the generated checkpoints (`evalrun make-model --gptq / --fp8`), for tests and
// benchmarks: a float checkpoint directory rewritten in place with every projection of its layers
// (the model's linear_sites) stored in a quantized format, and the format's settings recorded in
// config.json quantization_config (and quantize_config.json for GPTQ, as AutoGPTQ writes it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/fp8.hpp"
#include "quant/gptq.hpp"
#include "quant/linear.hpp"

namespace evalrun {

// One float projection -> its quantized layer: weight [out, in] row-major, bias [out] or empty.
using LayerQuantizer = std::function<quant::LinearPtr(const std::string& prefix, const std::vector<float>& weight,
                                                      std::int64_t out, std::int64_t in,
                                                      const std::vector<float>& bias)>;

// Rewrites model.safetensors of the float checkpoint in `dir` (LlamaForCausalLM / GraniteForCausalLM
// or RoBERTa): each projection's prefix.weight / prefix.bias replaced by the tensors of
// quantize(...)->export_tensors(prefix); every other tensor kept as it is. config.json gets
// "quantization_config" = `config`; with `autogptq_file` quantize_config.json is written too.
// A checkpoint that is already quantized: InputError.
void quantize_checkpoint(const std::string& dir, const nlohmann::ordered_json& config, bool autogptq_file,
                         const LayerQuantizer& quantize);

// GPTQ by round-to-nearest (quant::gptq_quantize_rtn); with settings.desc_act each layer gets a
// random permutation of its inputs (from `seed`) as its act-order g_idx.
void make_gptq_checkpoint(const std::string& dir, const quant::GptqSettings& settings, std::uint64_t seed);

// FP8 e4m3 weights (quant::fp8_quantize) with per-tensor or per-channel scales. With
// settings.static_activations each layer gets input_scale = max|x| / 448 over its inputs in a
// calibration pass of the float model on random token ids (from `seed`; 4 rows of 32 tokens).
void make_fp8_checkpoint(const std::string& dir, const quant::Fp8Settings& settings, bool per_channel,
                         std::uint64_t seed);

}  // namespace evalrun
