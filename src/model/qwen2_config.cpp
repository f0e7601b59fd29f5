// config.json keys of Qwen2ForCausalLM beyond the Llama ones (transformers' Qwen2Config).
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_qwen2_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  refuse_rope_scaling(j, path, "qwen2");
  c.qkv_bias = true;  // Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj without
  const bool use_window = json_bool(j, path, "use_sliding_window", false);
  const std::int64_t window = json_int(j, path, "sliding_window", false, 4096, 1);
  if (use_window && window < c.max_position_embeddings) {
    throw InputError(path + ": use_sliding_window",
                     "true (sliding_window " + std::to_string(window) + " < max_position_embeddings " +
                         std::to_string(c.max_position_embeddings) +
                         ") is not supported: Qwen2's per-layer sliding window (max_window_layers) is not implemented");
  }
  refuse_head_dim(j, path, c, "qwen2");  // Qwen2 has no head_dim key: it is hidden_size / num_attention_heads
}

}  // namespace evalrun::model
