// config.json of GPT2LMHeadModel (transformers' GPT2Config), and the GPT-2 keys GPTBigCode shares.
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

LlamaConfig::Mlp gelu_mlp(const std::string& act, const std::string& path, const char* key) {
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return LlamaConfig::Mlp::gelu_tanh;
  throw InputError(path + ": " + key, "'" + act + "' is not supported (supported: gelu_pytorch_tanh, gelu_new)");
}

void read_gpt2_style_keys(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  c.vocab_size = json_int(j, path, "vocab_size", false, 50257, 1);
  c.hidden_size = json_int(j, path, "n_embd", false, 768, 1);
  c.num_hidden_layers = json_int(j, path, "n_layer", false, 12, 1);
  c.num_attention_heads = json_int(j, path, "n_head", false, 12, 1);
  c.intermediate_size = json_int(j, path, "n_inner", false, 4 * c.hidden_size, 1);  // null: 4 n_embd
  c.max_position_embeddings = json_int(j, path, "n_positions", false, 1024, 1);
  if (c.hidden_size % c.num_attention_heads != 0) {
    throw InputError(path + ": n_head", "n_embd " + std::to_string(c.hidden_size) + " is not a multiple of n_head " +
                                            std::to_string(c.num_attention_heads));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.norm = LlamaConfig::Norm::layer;
  c.norm_eps = json_number(j, path, "layer_norm_epsilon", 1e-5);
  if (!(c.norm_eps > 0.0)) throw InputError(path + ": layer_norm_epsilon", "must be > 0");
  c.attention_bias = c.mlp_bias = true;
  c.learned_positions = true;
  c.gpt2_layout = true;
  // scale_attn_weights false: raw q . k scores (the multiplier 1 instead of 1/sqrt(head_dim)).
  if (!json_bool(j, path, "scale_attn_weights", true)) c.attention_multiplier = 1.0;
  c.tie_word_embeddings = json_bool(j, path, "tie_word_embeddings", true);
  // The *_pdrop dropouts apply only in training.
}

void read_gpt2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  read_gpt2_style_keys(j, path, c);
  c.num_key_value_heads = c.num_attention_heads;
  c.conv1d = true;
  c.mlp = gelu_mlp(json_string(j, path, "activation_function", "gelu_new"), path, "activation_function");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"}) {
    if (json_bool(j, path, key, false)) throw InputError(path + ": " + key, "true is not supported");
  }
  // The summary_* keys configure GPT2DoubleHeadsModel's head, which GPT2LMHeadModel does not have.
}

}  // namespace evalrun::model
