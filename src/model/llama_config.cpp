// config.json parsing and validation for the Llama family (LlamaForCausalLM, GraniteForCausalLM), and
// what the other families of the shared decoder have in common with it (their own keys:
// mistral_config.cpp, qwen2_config.cpp, mixtral_config.cpp, gemma_config.cpp, starcoder2_config.cpp;
// GPT-2 and GPTBigCode name their keys differently and are read by gpt2_config.cpp /
// gpt_bigcode_config.cpp). Defaults are those of transformers' config classes; fields that would
// change the computation in ways this implementation does not cover are errors rather than silently
// ignored.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/llama.hpp"
#include "model/loader_util.hpp"

namespace evalrun {
namespace {

using nlohmann::json;

// bos / eos / pad ids: an integer, null, or (eos in Llama 3 configs) a list whose first entry is used.
std::int64_t token_id(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<std::int64_t>();
  throw InputError(path + ": " + key, "must be an integer or a list of integers, got " + it->dump());
}

// rope_scaling of Llama / Granite: null, "default" (none), "linear" and "dynamic" (transformers 4.39's
// LlamaLinearScalingRotaryEmbedding / LlamaDynamicNTKScalingRotaryEmbedding: a factor only) or
// "llama3" (Llama 3.1 / 3.2: factor, low / high frequency factors, original context length).
void parse_rope_scaling(const json& j, const std::string& path, LlamaConfig& c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  const std::string where = path + ": rope_scaling";
  if (!it->is_object()) throw InputError(where, "must be an object or null, got " + it->dump());
  const json& rs = *it;
  std::string type = model::json_string(rs, where, "rope_type", "");
  if (type.empty()) type = model::json_string(rs, where, "type", "");
  if (type.empty()) throw InputError(where + ".rope_type", "missing");
  if (type == "default") return;
  if (type != "llama3" && type != "linear" && type != "dynamic") {
    throw InputError(where + ".rope_type",
                     "'" + type + "' is not supported (supported: linear, dynamic, llama3, default)");
  }
  c.rope_type = type;
  auto need = [&](const char* key) {
    auto f = rs.find(key);
    if (f == rs.end() || f->is_null()) {
      throw InputError(where + "." + key, "missing (required for rope_type " + type + ")");
    }
    if (!f->is_number()) throw InputError(where + "." + key, "must be a number, got " + f->dump());
    return f->get<double>();
  };
  c.rope_factor = need("factor");
  if (!(c.rope_factor >= 1.0)) {
    throw InputError(where + ".factor", "must be >= 1, got " + rs["factor"].dump());
  }
  if (type != "llama3") return;
  c.rope_low_freq_factor = need("low_freq_factor");
  c.rope_high_freq_factor = need("high_freq_factor");
  const double orig = need("original_max_position_embeddings");
  if (!(c.rope_low_freq_factor > 0.0)) throw InputError(where + ".low_freq_factor", "must be > 0");
  if (!(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
    throw InputError(where + ".high_freq_factor", "must be greater than low_freq_factor");
  }
  if (!(orig >= 1.0) || orig != std::floor(orig)) {
    throw InputError(where + ".original_max_position_embeddings", "must be a positive integer");
  }
  c.rope_original_max_position_embeddings = static_cast<std::int64_t>(orig);
}

}  // namespace

namespace model {
void refuse_rope_scaling(const nlohmann::json& j, const std::string& path, const char* family) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  std::string type;
  if (it->is_object()) {
    type = json_string(*it, path + ": rope_scaling", "rope_type", "");
    if (type.empty()) type = json_string(*it, path + ": rope_scaling", "type", "");
  }
  if (type == "default") return;
  throw InputError(path + ": rope_scaling", it->dump() + " is not supported for " + family + " (only null)");
}

void refuse_head_dim(const nlohmann::json& j, const std::string& path, const LlamaConfig& c, const char* family) {
  if (!j.contains("head_dim") || j["head_dim"].is_null()) return;
  const std::int64_t hd = json_int(j, path, "head_dim", false, 0, 1);
  if (hd * c.num_attention_heads != c.hidden_size) {
    throw InputError(path + ": head_dim", std::to_string(hd) + " is not supported for " + family +
                                              " (must be hidden_size / num_attention_heads = " +
                                              std::to_string(c.hidden_size / c.num_attention_heads) + ")");
  }
}

}  // namespace model

LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
  using model::json_bool;
  using model::json_int;
  using model::json_number;
  using model::json_string;
  const json j = model::read_config_json(path);
  LlamaConfig c;

  c.model_type = json_string(j, path, "model_type", "");
  static const std::vector<std::pair<std::string, std::string>> families = {
      {"llama", "LlamaForCausalLM"},
      {"granite", "GraniteForCausalLM"},
      {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},
      {"mixtral", "MixtralForCausalLM"},
      {"gemma", "GemmaForCausalLM"},
      {"starcoder2", "Starcoder2ForCausalLM"},
      {"gpt_bigcode", "GPTBigCodeForCausalLM"},
      {"gpt2", "GPT2LMHeadModel"}};
  std::string expected_arch, supported_types, supported_archs;
  for (const auto& [type, name] : families) {
    if (type == c.model_type) expected_arch = name;
    supported_types += (supported_types.empty() ? "" : ", ") + type;
    supported_archs += (supported_archs.empty() ? "" : ", ") + name;
  }
  if (expected_arch.empty()) {
    throw InputError(path + ": model_type", "'" + c.model_type + "' is not supported (supported: " + supported_types + ")");
  }
  const bool granite = c.model_type == "granite";
  const bool mistral = c.model_type == "mistral", qwen2 = c.model_type == "qwen2";
  const bool mixtral = c.model_type == "mixtral", gemma = c.model_type == "gemma",
             starcoder2 = c.model_type == "starcoder2";
  auto arch = j.find("architectures");
  if (arch == j.end() || arch->is_null()) throw InputError(path + ": architectures", "missing");
  if (!arch->is_array()) throw InputError(path + ": architectures", "must be a list of strings");
  for (const auto& a : *arch) {
    if (!a.is_string()) throw InputError(path + ": architectures", "must be a list of strings");
    c.architectures.push_back(a.get<std::string>());
  }
  if (c.architectures.size() != 1) {
    throw InputError(path + ": architectures", "expected exactly one architecture, got " +
                                                   std::to_string(c.architectures.size()) +
                                                   " (supported: " + supported_archs + ")");
  }
  if (c.architectures[0] != expected_arch) {
    bool known = false;
    for (const auto& f : families) known = known || f.second == c.architectures[0];
    throw InputError(path + ": architectures",
                     "'" + c.architectures[0] + "' " +
                         (known ? "does not match model_type '" + c.model_type + "' (expected " + expected_arch + ")"
                                : "is not supported (supported: " + supported_archs + ")"));
  }

  if (c.model_type == "gpt2" || c.model_type == "gpt_bigcode") {
    // Their own key names (n_embd, n_head, ...) and layout: read entirely by the family's reader.
    if (c.model_type == "gpt2") model::read_gpt2_config(j, path, c);
    if (c.model_type == "gpt_bigcode") model::read_gpt_bigcode_config(j, path, c);
    c.bos_token_id = token_id(j, path, "bos_token_id");
    c.eos_token_id = token_id(j, path, "eos_token_id");
    c.pad_token_id = token_id(j, path, "pad_token_id");
    return c;
  }

  c.vocab_size = json_int(j, path, "vocab_size", true, 0, 1);
  c.hidden_size = json_int(j, path, "hidden_size", true, 0, 1);
  c.intermediate_size = json_int(j, path, "intermediate_size", true, 0, 1);
  c.num_hidden_layers = json_int(j, path, "num_hidden_layers", true, 0, 1);
  c.num_attention_heads = json_int(j, path, "num_attention_heads", true, 0, 1);
  // Mistral / Mixtral / Qwen2 / Gemma / StarCoder2 configs default it to 8 / 8 / 32 / 16 / 2 rather
  // than to num_attention_heads: required there.
  c.num_key_value_heads = json_int(j, path, "num_key_value_heads", mistral || qwen2 || mixtral || gemma || starcoder2,
                                   c.num_attention_heads, 1);
  c.max_position_embeddings =
      json_int(j, path, "max_position_embeddings", false,
               mistral || mixtral ? 131072 : qwen2 ? 32768 : gemma ? 8192 : starcoder2 ? 4096 : 2048, 1);
  if (!starcoder2) {  // StarCoder2: norm_epsilon (starcoder2_config.cpp)
    c.norm_eps = json_number(j, path, "rms_norm_eps", 1e-6);
    if (!(c.norm_eps > 0.0)) throw InputError(path + ": rms_norm_eps", "must be > 0");
  }
  c.rope_theta = json_number(j, path, "rope_theta", 10000.0);
  if (!(c.rope_theta > 0.0)) throw InputError(path + ": rope_theta", "must be > 0");
  c.tie_word_embeddings = json_bool(j, path, "tie_word_embeddings", false);
  c.attention_bias = json_bool(j, path, "attention_bias", false);
  c.mlp_bias = json_bool(j, path, "mlp_bias", false);
  if (c.attention_bias) throw InputError(path + ": attention_bias", "true is not supported (no projection biases)");
  if (c.mlp_bias) throw InputError(path + ": mlp_bias", "true is not supported (no MLP biases)");
  // Gemma's activation is read by read_gemma_config (hidden_activation; hidden_act is ignored there),
  // StarCoder2's (a plain GELU MLP) by read_starcoder2_config.
  if (!gemma && !starcoder2) {
    const std::string act = json_string(j, path, "hidden_act", "silu");
    if (act != "silu") throw InputError(path + ": hidden_act", "'" + act + "' is not supported (only silu)");
  }

  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw InputError(path + ": num_key_value_heads", "num_attention_heads " + std::to_string(c.num_attention_heads) +
                                                         " is not a multiple of num_key_value_heads " +
                                                         std::to_string(c.num_key_value_heads));
  }
  const bool divisible = c.hidden_size % c.num_attention_heads == 0;
  const std::int64_t default_head_dim = c.hidden_size / c.num_attention_heads;
  // Qwen2 and StarCoder2 do not read head_dim: their readers refuse one other than hidden / heads.
  if (qwen2) model::read_qwen2_config(j, path, c);
  if (starcoder2) model::read_starcoder2_config(j, path, c);
  if (gemma) model::read_gemma_config(j, path, c);  // head_dim with Gemma's default
  if (!qwen2 && !starcoder2 && !gemma) c.head_dim = json_int(j, path, "head_dim", false, 0, 2);
  if (c.head_dim == 0 || granite) {
    // Granite (and Llama without head_dim) use hidden_size / num_attention_heads and need it exact.
    if (!divisible) {
      throw InputError(path + ": num_attention_heads", "hidden_size " + std::to_string(c.hidden_size) +
                                                           " is not a multiple of num_attention_heads " +
                                                           std::to_string(c.num_attention_heads));
    }
    if (c.head_dim != 0 && c.head_dim != default_head_dim) {
      throw InputError(path + ": head_dim", "must equal hidden_size / num_attention_heads for granite");
    }
    c.head_dim = default_head_dim;
  }
  if (c.head_dim % 2 != 0) throw InputError(path + ": head_dim", "must be even (rotary embedding)");
  if (mistral) model::read_mistral_config(j, path, c);
  if (mixtral) model::read_mixtral_config(j, path, c);
  if (!mistral && !qwen2 && !mixtral && !gemma && !starcoder2) parse_rope_scaling(j, path, c);

  if (granite) {
    c.embedding_multiplier = json_number(j, path, "embedding_multiplier", 1.0);
    c.attention_multiplier = json_number(j, path, "attention_multiplier", 1.0);
    c.residual_multiplier = json_number(j, path, "residual_multiplier", 1.0);
    c.logits_scaling = json_number(j, path, "logits_scaling", 1.0);
    if (c.attention_multiplier == 0.0) throw InputError(path + ": attention_multiplier", "must not be 0");
    if (c.logits_scaling == 0.0) throw InputError(path + ": logits_scaling", "must not be 0");
  }
  c.bos_token_id = token_id(j, path, "bos_token_id");
  c.eos_token_id = token_id(j, path, "eos_token_id");
  c.pad_token_id = token_id(j, path, "pad_token_id");
  return c;
}

}  // namespace evalrun
