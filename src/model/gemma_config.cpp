// config.json keys of GemmaForCausalLM beyond the Llama ones (transformers 4.39's GemmaConfig and
// modeling_gemma.py).
#include <cmath>

#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_gemma_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  refuse_rope_scaling(j, path, "gemma");
  // GemmaConfig's defaults: head_dim 256 (not hidden_size / num_attention_heads), tied embeddings.
  c.head_dim = json_int(j, path, "head_dim", false, 256, 2);
  c.tie_word_embeddings = json_bool(j, path, "tie_word_embeddings", true);
  // GemmaMLP takes hidden_activation; when it is null it uses gelu_pytorch_tanh whatever hidden_act
  // says (the released configs say "gelu", but the models were trained with the tanh approximation),
  // so hidden_act is never read.
  const auto it = j.find("hidden_activation");
  const bool given = it != j.end() && !it->is_null();
  const std::string act = given ? json_string(j, path, "hidden_activation", "") : "gelu_pytorch_tanh";
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    c.mlp_activation = ops::GateActivation::gelu_tanh;
  } else if (act == "gelu") {
    c.mlp_activation = ops::GateActivation::gelu;
  } else {
    throw InputError(path + ": hidden_activation",
                     "'" + act + "' is not supported for gemma (supported: gelu_pytorch_tanh, gelu_new, gelu, null)");
  }
  // GemmaModel: inputs_embeds * torch.tensor(hidden_size ** 0.5, dtype=hidden dtype).
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  c.embedding_multiplier_in_dtype = true;
  c.norm_weight_plus_one = true;  // GemmaRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)
}

}  // namespace evalrun::model
