// config.json keys of MixtralForCausalLM beyond the Llama ones (transformers' MixtralConfig).
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_mixtral_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  refuse_rope_scaling(j, path, "mixtral");
  c.num_experts = json_int(j, path, "num_local_experts", false, 8, 1);
  c.experts_per_token = json_int(j, path, "num_experts_per_tok", false, 2, 1);
  if (c.experts_per_token > c.num_experts) {
    throw InputError(path + ": num_experts_per_tok", std::to_string(c.experts_per_token) + " is more than num_local_experts " +
                                                         std::to_string(c.num_experts));
  }
  // router_jitter_noise and the aux loss apply only in training; output_router_logits only adds outputs.
  c.sliding_window = j.contains("sliding_window") && !j["sliding_window"].is_null()
                         ? json_int(j, path, "sliding_window", false, 0, 1)
                         : 0;
}

}  // namespace evalrun::model
