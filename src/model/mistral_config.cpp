// config.json keys of MistralForCausalLM beyond the Llama ones (transformers' MistralConfig).
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_mistral_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  refuse_rope_scaling(j, path, "mistral");
  // MistralConfig's default is 4096; null turns the window off.
  auto it = j.find("sliding_window");
  if (it == j.end()) {
    c.sliding_window = 4096;
  } else if (it->is_null()) {
    c.sliding_window = 0;
  } else {
    c.sliding_window = json_int(j, path, "sliding_window", false, 0, 1);
  }
}

}  // namespace evalrun::model
