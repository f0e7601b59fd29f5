// The config.json readers of the decoder families that share LlamaModel (internal to src/model):
// LlamaConfig::from_json_file reads what they have in common and calls the family's reader for the
// keys only that family has. A key whose value would change the computation in a way evalrun does not
// implement is an InputError naming config.json, the key and the value.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/llama.hpp"

namespace evalrun::model {

// MistralForCausalLM (mistral_config.cpp): sliding_window (null: none), rope_scaling must be null.
void read_mistral_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);
// Qwen2ForCausalLM (qwen2_config.cpp): q/k/v biases; use_sliding_window true with a window shorter
// than max_position_embeddings is refused (per-layer windows are not implemented); head_dim, if
// given, must be hidden_size / num_attention_heads; rope_scaling must be null.
void read_qwen2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);

// MixtralForCausalLM (mixtral_config.cpp): num_local_experts, num_experts_per_tok, sliding_window
// (null: none), rope_scaling must be null.
void read_mixtral_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);

// GemmaForCausalLM (gemma_config.cpp): head_dim (default 256, need not be hidden_size /
// num_attention_heads), hidden_activation (null: gelu_pytorch_tanh; hidden_act is ignored, as
// transformers 4.39 does), tied embeddings by default, the sqrt(hidden_size) embedding scale and the
// (1 + w) RMSNorm; rope_scaling must be null.
void read_gemma_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);
// Starcoder2ForCausalLM (starcoder2_config.cpp): LayerNorm (norm_epsilon), a plain GELU MLP
// (hidden_act), biases on every projection (use_bias), sliding_window (null: none), tied embeddings
// by default; rope_scaling must be null, head_dim (if given) hidden_size / num_attention_heads.
void read_starcoder2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);

// GPT2LMHeadModel (gpt2_config.cpp) and GPTBigCodeForCausalLM (gpt_bigcode_config.cpp): every field,
// from GPT-2's key names (n_embd, n_head, n_layer, n_inner, n_positions, layer_norm_epsilon,
// activation_function); learned positions, LayerNorm, biased projections, a plain GELU MLP, tied
// embeddings. GPT-2: Conv1D weights, q|k|v fused; scale_attn_by_inverse_layer_idx,
// reorder_and_upcast_attn and add_cross_attention true are refused. GPTBigCode: multi_query (one
// key/value head), nn.Linear weights; multi_query false and attention_softmax_in_fp32 false are refused.
void read_gpt2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);
void read_gpt_bigcode_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c);
// What the two share (gpt2_config.cpp): the dimensions and the layer structure.
void read_gpt2_style_keys(const nlohmann::json& j, const std::string& path, LlamaConfig& c);

// The plain MLP's activation from a config.json key: gelu_pytorch_tanh and gelu_new (both the tanh
// approximation); anything else is refused, naming the key.
LlamaConfig::Mlp gelu_mlp(const std::string& act, const std::string& path, const char* key);

// A rope_scaling other than null (or type "default") for a family without rope scaling.
void refuse_rope_scaling(const nlohmann::json& j, const std::string& path, const char* family);
// A head_dim other than hidden_size / num_attention_heads for a family that does not read the key.
void refuse_head_dim(const nlohmann::json& j, const std::string& path, const LlamaConfig& c, const char* family);

}  // namespace evalrun::model
