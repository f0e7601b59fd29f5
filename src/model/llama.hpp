// Llama-family decoders (LlamaForCausalLM, GraniteForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// MixtralForCausalLM, GemmaForCausalLM, Starcoder2ForCausalLM, GPTBigCodeForCausalLM, GPT2LMHeadModel)
// loaded from a Hugging Face checkpoint
// directory and run on the CPU with libtorch, with a key/value cache for greedy generation. Numerics
// follow transformers' eager implementation. Torch stays behind a pimpl: this header is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "ops/activations.hpp"

namespace evalrun {

// config.json fields; from_json_file validates them (InputError naming config.json and the key).
// Unsupported fields with non-default values (e.g. a rope_scaling type other than linear / dynamic / llama3,
// attention_bias / mlp_bias = true when not implemented, hidden_act other than silu) are errors.
struct LlamaConfig {
  std::string model_type;  // "llama", "granite", "mistral", "qwen2", "mixtral", "gemma", "starcoder2", "gpt_bigcode", "gpt2"
  std::vector<std::string> architectures;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json sets it
  std::int64_t max_position_embeddings = 0;
  // RMSNorm (Llama) or LayerNorm with weight and bias (StarCoder2, GPT-2, GPTBigCode), eps norm_eps.
  enum class Norm { rms, layer };
  Norm norm = Norm::rms;
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling {"rope_type"/"type": "linear" | "dynamic" | "llama3", factor, and for llama3
  // low_freq_factor, high_freq_factor, original_max_position_embeddings}; rope_type "" = none.
  // linear: positions / factor. dynamic (NTK): a forward call whose row reaches a length n past
  // max_position_embeddings rotates that row's new q / k with the base
  // theta * (factor * n / max_position_embeddings - (factor - 1))^(d / (d - 2)); cached keys keep the
  // frequencies they were rotated with.
  std::string rope_type;
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_position_embeddings = 8192;
  bool tie_word_embeddings = false;
  // Biases on q/k/v/o (StarCoder2 use_bias, GPT-2) and on the MLP's projections.
  bool attention_bias = false;
  bool mlp_bias = false;
  // The MLP: gated, down(act(gate x) * up x) with act = mlp_activation (Llama's silu, Gemma's GELUs),
  // or plain, down(gelu_tanh(up x)) (StarCoder2 c_fc / c_proj, GPT-2 gelu_new, GPTBigCode
  // gelu_pytorch_tanh: the same tanh approximation).
  enum class Mlp { gated, gelu_tanh };
  Mlp mlp = Mlp::gated;
  // GPT-2 / GPTBigCode: learned absolute position embeddings (wpe, [max_position_embeddings, H])
  // added to the token embeddings, and no rotary embedding.
  bool learned_positions = false;
  // GPT-2 / GPTBigCode checkpoint layout: transformer.{wte, wpe, ln_f}, transformer.h.N.{ln_1,
  // attn.c_attn (q | k | v fused), attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}; split into the q/k/v
  // slots at load. conv1d: GPT-2's Conv1D stores every projection weight [in, out].
  bool gpt2_layout = false;
  bool conv1d = false;
  // Qwen2: q_proj, k_proj and v_proj have biases (o_proj and the MLP do not).
  bool qkv_bias = false;
  // Mistral: sliding-window attention, the query at position p sees keys max(0, p - W) .. p in the
  // prompt pass and in every cached decode step (transformers 4.39 eager); 0 = no window.
  std::int64_t sliding_window = 0;
  // Mixtral: every layer's MLP is a sparse mixture of num_local_experts experts, each token routed
  // to num_experts_per_tok of them (0 experts: the dense gated MLP).
  std::int64_t num_experts = 0, experts_per_token = 0;
  // Granite: embeddings x embedding_multiplier, attention scores x attention_multiplier (instead of
  // 1/sqrt(head_dim)), residual branches x residual_multiplier, logits / logits_scaling.
  double embedding_multiplier = 1.0;
  double attention_multiplier = 0.0;  // 0 = 1/sqrt(head_dim) (GPT-2 scale_attn_weights false: 1)
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  // Gemma: embeddings x sqrt(hidden_size) (embedding_multiplier) as a tensor of the hidden dtype, so a
  // bfloat16 run rounds the multiplier to bfloat16 first; RMSNorm scales by (1 + weight) in float32
  // before the cast back (the stored weights are offsets from 1); the MLP gate's activation.
  bool embedding_multiplier_in_dtype = false;
  bool norm_weight_plus_one = false;
  ops::GateActivation mlp_activation = ops::GateActivation::silu;
  std::int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;  // from config.json, -1 if absent

  static LlamaConfig from_json_file(const std::string& path);
};

// LlamaForCausalLM, GraniteForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM,
// GemmaForCausalLM, Starcoder2ForCausalLM, GPTBigCodeForCausalLM and GPT2LMHeadModel (one registry
// row each): the same decoder, the family differences being config options of the shared layers (a
// sliding window in ops::attention_f32, biases through load_linear, a mixture-of-experts MLP routed
// by ops/moe, the gate activation, the (1 + w) RMSNorm, an embedding scale, LayerNorm, a plain GELU
// MLP, learned positions, fused or Conv1D checkpoint layouts) read by each family's config reader
// (llama_config.cpp, mistral_config.cpp, qwen2_config.cpp, mixtral_config.cpp, gemma_config.cpp,
// starcoder2_config.cpp, gpt2_config.cpp, gpt_bigcode_config.cpp).
class LlamaModel : public CausalLM {
 public:
  // Reads dir/config.json and safetensors (single or sharded). Every expected tensor must exist with
  // its shape (InputError naming tensor and shapes); lm_head.weight may be absent when tied. F32/F16/BF16
  // converted to dtype; fp16 as in RobertaModel (weights rounded to fp16, compute float32).
  // Quantized checkpoints (config.json quantization_config or quantize_config.json) load their layers
  // in that format (ModelLoad::quantization_method). With a tensor-parallel group the model holds and
  // reads only this rank's part of the projections (see llama.cpp); a model that cannot be split T
  // ways is an InputError naming parallel.tensor_parallel and the config.json field.
  static std::unique_ptr<LlamaModel> load(const ModelLoad& how);
  // Tests and benchmarks: false loads bfloat16 models on the torch path (the raw-buffer bfloat16
  // path's reference) until set back to true (the default). Not thread-safe; set before loading.
  static void set_raw_bfloat16_path(bool enabled);
  ~LlamaModel() override;
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const;

  ModelDims dims() const override;
  // The same from dir/config.json alone (the registry row's dims).
  static ModelDims dims_of(const std::string& dir);
  std::string architecture() const override;
  std::int64_t vocab_size() const override;
  std::unique_ptr<KvCache> new_cache(std::int64_t batch, std::int64_t capacity) const override;
  void forward(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
               std::int64_t batch, std::int64_t seq, KvCache& cache, bool all_positions,
               std::vector<float>& logits) override;
  // The embeddings (after any multiplier, with any learned positions), the output of layers 1 .. n-1,
  // and the output of layer n with the final norm applied.
  std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, std::int64_t batch,
                                                std::int64_t seq) override;
  std::string quantize_lm_head_int8() override;

  // Mixtral: the tokens forward() routed to each expert so far, [layer][expert] (real tokens only, not
  // padding; each counted once per expert it went to: a layer sums to tokens x num_experts_per_tok).
  // Empty for a dense model or before the first forward call.
  const std::vector<std::vector<std::int64_t>>& expert_load() const;
  // expert_load() at debug level (-v), one line per layer, e.g. "layer 0 experts load: 12 9 15 12";
  // per rank (data-parallel ranks count their own shard; of a tensor-parallel group only its first
  // rank logs, the others route the same tokens). The destructor calls it: the end of the run.
  void log_expert_load() const;

  struct Impl;

 protected:
  model::Weights& weights() const override;

 private:
  explicit LlamaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace evalrun
