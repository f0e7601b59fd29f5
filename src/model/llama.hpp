// Llama-family decoders (LlamaForCausalLM, GraniteForCausalLM) loaded from a Hugging Face checkpoint
// directory and run on the CPU with libtorch, with a key/value cache for greedy generation. Numerics
// follow transformers' eager implementation. Torch stays behind a pimpl: this header is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "quant/linear.hpp"

namespace evalrun {

class Communicator;

// config.json fields; from_json_file validates them (InputError naming config.json and the key).
// Unsupported fields with non-default values (e.g. a rope_scaling type other than "llama3",
// attention_bias / mlp_bias = true when not implemented, hidden_act other than silu) are errors.
struct LlamaConfig {
  std::string model_type;  // "llama" or "granite"
  std::vector<std::string> architectures;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json sets it
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling {"rope_type"/"type": "llama3", factor, low_freq_factor, high_freq_factor,
  // original_max_position_embeddings}; rope_type "" = none.
  std::string rope_type;
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_position_embeddings = 8192;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  // Granite: embeddings x embedding_multiplier, attention scores x attention_multiplier (instead of
  // 1/sqrt(head_dim)), residual branches x residual_multiplier, logits / logits_scaling.
  double embedding_multiplier = 1.0;
  double attention_multiplier = 0.0;  // 0 = 1/sqrt(head_dim)
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  std::int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;  // from config.json, -1 if absent

  static LlamaConfig from_json_file(const std::string& path);
};

class DecoderModel {
 public:
  // Reads dir/config.json and safetensors (single or sharded). Every expected tensor must exist with
  // its shape (InputError naming tensor and shapes); lm_head.weight may be absent when tied. F32/F16/BF16
  // converted to dtype; fp16 as in RobertaModel (weights rounded to fp16, compute float32).
  // Quantized checkpoints (config.json quantization_config or quantize_config.json) load their layers
  // in that format; quantization_method is the run's [quantization] method ("auto": whatever the
  // checkpoint holds; otherwise it must match, InputError naming quantization.method).
  // tp: the tensor-parallel group this rank belongs to (null or size 1: the whole model); the model
  // then holds and reads only this rank's part of the projections (see llama.cpp) and every rank of
  // the group must call forward with the same inputs. A model that cannot be split T ways is an
  // InputError naming parallel.tensor_parallel and the config.json field.
  static std::unique_ptr<DecoderModel> load(const std::string& dir, DType dtype, Device device,
                                            const std::string& quantization_method = "auto",
                                            Communicator* tp = nullptr);
  ~DecoderModel();
  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  const LlamaConfig& config() const;

  // The projections of the layers, for quantization tools (calibration, direct quantization, memory
  // reports). Each site is one Linear the forward pass calls; it holds the checkpoint layers
  // `prefixes` side by side (q | k | v), `part_out[i]` outputs each. replace_linear swaps one for a
  // layer with the same in / out features (any storage: float32 only on the sgemm path).
  std::vector<quant::LinearSite> linear_sites();
  // Returns the layer it replaced (calibration wraps a layer and restores it).
  quant::LinearPtr replace_linear(std::size_t site, quant::LinearPtr layer);
  // How the checkpoint's layers are stored ("none", "gptq w4 g32 asym act_order", ...).
  std::string quantization() const;
  const char* compute_dtype() const;
  // Bytes of weights this rank holds (projections, embeddings, norms, LM head).
  std::size_t weight_bytes() const;

  // The key/value cache of one batch: `batch` rows, room for `capacity` positions per row.
  struct Cache;
  std::unique_ptr<Cache, void (*)(Cache*)> new_cache(std::int64_t batch, std::int64_t capacity) const;
  static std::int64_t cached_length(const Cache& cache);  // positions filled so far (same for all rows)

  // Appends `seq` tokens per row to the cache and runs them.
  //   ids, positions: [batch, seq] row-major; positions are the RoPE positions (left padding: pads get 0,
  //     real tokens 0, 1, 2, ... from their first real token).
  //   key_mask: [batch, cached_length + seq], 1 = attend, 0 = padding: a query attends to key j when
  //     key_mask[j] == 1 and j <= its own index (causal).
  //   logits: float32 out; all_positions = false -> [batch, vocab] for the last of the `seq` tokens;
  //     true -> [batch, seq, vocab].
  void forward(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
               std::int64_t batch, std::int64_t seq, Cache& cache, bool all_positions, std::vector<float>& logits);

  // For tests: hidden states [layers + 1][batch * seq * hidden] as transformers' output_hidden_states:
  // the embeddings (after any multiplier), the output of layers 1 .. n-1, and the output of layer n
  // with the final RMSNorm applied. No cache, no padding.
  std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, std::int64_t batch, std::int64_t seq);

  struct Impl;

 private:
  explicit DecoderModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace evalrun
