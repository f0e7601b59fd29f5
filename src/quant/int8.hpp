// INT8 W8A8: 8-bit weights and activations, integer matrix products.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "io/safetensors.hpp"
#include "quant/linear.hpp"

namespace evalrun::quant {

struct Int8Settings {
  std::string describe() const;
};

// Validates the checkpoint's quantization settings (`where` names the file and key for errors).
Int8Settings parse_int8_settings(const nlohmann::json& settings, const std::string& where);

// Loads the layer stored under `prefix` (e.g. "model.layers.0.self_attn.q_proj"), checking every
// tensor's dtype and shape against in / out (InputError naming the tensor); adds the names it read
// to `used`.
LinearPtr load_int8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                         const Int8Settings& settings, std::set<std::string>& used);

}  // namespace evalrun::quant
