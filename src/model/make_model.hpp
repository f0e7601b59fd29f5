// Deterministic random RoBERTa checkpoints in Hugging Face format, for tests and benchmarks
// (`evalrun make-model`). Writes config.json and model.safetensors (F32) into a directory; the
// tokenizer files are written separately.
#pragma once

#include <cstdint>
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

}  // namespace evalrun
