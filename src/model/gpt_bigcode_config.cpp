// config.json of GPTBigCodeForCausalLM (transformers' GPTBigCodeConfig: GPT-2's keys plus multi-query
// attention).
#include "common/errors.hpp"
#include "model/family_config.hpp"
#include "model/loader_util.hpp"

namespace evalrun::model {

void read_gpt_bigcode_config(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
  read_gpt2_style_keys(j, path, c);
  c.mlp = gelu_mlp(json_string(j, path, "activation_function", "gelu_pytorch_tanh"), path, "activation_function");
  // multi_query false lays c_attn out per head (q, k, v of head 0, then head 1, ...), not implemented.
  if (!json_bool(j, path, "multi_query", true)) {
    throw InputError(path + ": multi_query", "false is not supported (only multi-query attention: one key/value head)");
  }
  c.num_key_value_heads = 1;
  // Softmax in the compute dtype rather than float32 would round differently in bfloat16: refused.
  // (scale_attention_softmax_in_fp32 only moves a 1/(layer+1) factor around the float32 upcast.)
  if (!json_bool(j, path, "attention_softmax_in_fp32", true)) {
    throw InputError(path + ": attention_softmax_in_fp32", "false is not supported (softmax runs in float32)");
  }
}

}  // namespace evalrun::model
