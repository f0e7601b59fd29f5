// Deterministic random RoBERTa and Llama-family checkpoints in Hugging Face format, for tests and benchmarks
// (`evalrun make-model`). Writes config.json and model.safetensors (F32) into a directory; the
// tokenizer files are written separately.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/roberta.hpp"

namespace evalrun {

// Presets:
//   "tiny":         hidden 32, 2 layers, 4 heads, intermediate 64, max_position_embeddings 514
//   "roberta-base": hidden 768, 12 layers, 12 heads, intermediate 3072, max_position_embeddings 514
// vocab_size 0 = the preset's default (tiny 1000, roberta-base 50265); otherwise at least 4
// (<s>, <pad>, </s>, <unk>). pad_token_id 1, type_vocab_size 1, LayerNorm eps 1e-5, exact GELU.
// Weights as HF's init (normal, std 0.02; LayerNorm 1 / 0; the padding rows of the embeddings 0),
// except that biases are small random values too, so tests notice a bias that is dropped. Same
// seed, same bytes. The masked_lm head is saved tied (no lm_head.decoder.weight), like HF.
// Unknown preset or bad vocab size: InputError.
void make_roberta_checkpoint(const std::string& dir, const std::string& preset, RobertaHead head, std::uint64_t seed,
                             std::int64_t vocab_size = 0);

std::vector<std::string> roberta_presets();

// Deterministic random Llama-family checkpoints (LlamaForCausalLM / GraniteForCausalLM, F32):
//   "tiny-llama":   hidden 64, 2 layers, 4 heads, 2 kv heads (head_dim 16), intermediate 128,
//                   max_position_embeddings 512, untied lm_head; vocab_size 0 = 256
//   "tiny-granite": the same shapes as GraniteForCausalLM with embedding_multiplier 12,
//                   attention_multiplier 0.125 (not 1/sqrt(16), so a model that ignores it differs),
//                   residual_multiplier 0.22, logits_scaling 8
//   "llama-110m":   hidden 768, 12 layers, 12 heads, 4 kv heads, intermediate 2048, vocab 32000,
//                   max_position_embeddings 2048, untied lm_head (benchmarks)
// RMSNorm eps 1e-5, RoPE theta 10000, no rope_scaling, bos 1, eos 2. Linear and embedding weights are
// normal(0, std): std 0.02 (HF's init) for llama-110m, 0.1 for the tiny presets so that their
// attention is far from uniform and tests notice a wrong scale or rotation; the RMSNorm weights are
// 1 + normal(0, 0.1) rather than HF's ones so tests notice a norm weight that is dropped. Same seed, same bytes. vocab_size, when not 0, must be
// at least 3. Unknown preset or bad vocab size: InputError.
// `ids`, when given, replaces bos 1 / eos 2 in config.json (and adds pad_token_id) and is also written
// to generation_config.json, so the checkpoint's files agree with the tokenizer written beside it.
struct SpecialTokenIds {
  std::int64_t bos = 1, eos = 2, pad = -1;  // pad -1: none
};
void make_llama_checkpoint(const std::string& dir, const std::string& preset, std::uint64_t seed,
                           std::int64_t vocab_size = 0, const std::optional<SpecialTokenIds>& ids = std::nullopt);

std::vector<std::string> llama_presets();

}  // namespace evalrun
