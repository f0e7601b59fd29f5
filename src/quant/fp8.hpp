// FP8: float8 e4m3 weights with scales.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "io/safetensors.hpp"
#include "quant/linear.hpp"

namespace evalrun::quant {

struct Fp8Settings {
  std::string describe() const;
};

// Validates the checkpoint's quantization settings (`where` names the file and key for errors).
Fp8Settings parse_fp8_settings(const nlohmann::json& settings, const std::string& where);

// Loads the layer stored under `prefix` (e.g. "model.layers.0.self_attn.q_proj"), checking every
// tensor's dtype and shape against in / out (InputError naming the tensor); adds the names it read
// to `used`.
LinearPtr load_fp8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                         const Fp8Settings& settings, std::set<std::string>& used);

}  // namespace evalrun::quant
