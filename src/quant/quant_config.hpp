// How a checkpoint's linear layers are quantized, read from its own files: config.json
// "quantization_config" (Hugging Face) or quantize_config.json (AutoGPTQ), whichever is present
// (config.json wins). Each method's settings are parsed and validated by that method's file.
#pragma once

#include <string>

#include "quant/fp8.hpp"
#include "quant/gptq.hpp"
#include "quant/int8.hpp"

namespace evalrun::quant {

enum class Method { none, gptq, int8, fp8 };
const char* to_string(Method);

struct QuantConfig {
  Method method = Method::none;
  std::string where;  // "dir/config.json: quantization_config" (for messages); "" when none
  GptqSettings gptq;
  Int8Settings int8;
  Fp8Settings fp8;

  // One line for logs and result files: "none", "gptq w4 g32 asym act_order", ...
  std::string describe() const;
};

// InputError naming the file and key for an unknown quant_method or a bad setting.
QuantConfig read_quant_config(const std::string& checkpoint_dir);

}  // namespace evalrun::quant
