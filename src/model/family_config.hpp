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

// A rope_scaling other than null (or type "default") for a family without rope scaling.
void refuse_rope_scaling(const nlohmann::json& j, const std::string& path, const char* family);

}  // namespace evalrun::model
