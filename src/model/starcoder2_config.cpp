// config.json keys of Starcoder2ForCausalLM beyond the Llama ones (transformers' Starcoder2Config).
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_starcoder2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  refuse_rope_scaling(j, path, "starcoder2");
  refuse_head_dim(j, path, c, "starcoder2");  // Starcoder2Attention uses hidden_size / num_attention_heads
  c.norm = LlamaConfig::Norm::layer;  // nn.LayerNorm: weight and bias, whatever use_bias says
  c.norm_eps = json_number(j, path, "norm_epsilon", 1e-5);
  if (!(c.norm_eps > 0.0)) throw InputError(path + ": norm_epsilon", "must be > 0");
  c.mlp = gelu_mlp(json_string(j, path, "hidden_act", "gelu_pytorch_tanh"), path, "hidden_act");
  // use_bias: q/k/v/o and c_fc / c_proj.
  c.attention_bias = c.mlp_bias = json_bool(j, path, "use_bias", true);
  c.tie_word_embeddings = json_bool(j, path, "tie_word_embeddings", true);  // PretrainedConfig's default
  // Starcoder2Config's default is null: no window.
  c.sliding_window = j.contains("sliding_window") && !j["sliding_window"].is_null()
                         ? json_int(j, path, "sliding_window", false, 0, 1)
                         : 0;
  // embedding_dropout, residual_dropout and attention_dropout apply only in training.
}

}  // namespace evalrun::model
