// Inputs checked against the model before a run starts (one call from each flow's load(), on every
// rank for its own shard):
//   - positions: a sequence longer than a learned position table (RoBERTa) is an InputError naming the
//     sample and the key that sets its length; rotary models (Llama, Granite) have no table and, like
//     transformers, run past max_position_embeddings: one warning says how many sequences do (an info
//     line instead under rope_scaling "dynamic", which is made for it);
//   - memory: what the batch holding the longest sequence needs (KV cache, attention scores of one
//     layer, logits rows kept) against run.max_batch_bytes, so a very long prompt is an InputError
//     with the numbers instead of an allocation of terabytes inside libtorch.
// Plain arithmetic on sizes (no torch): the flows say what the model and the sequences are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_spec.hpp"
#include "model/model.hpp"  // ModelDims

namespace evalrun {

struct SequenceNeed {
  std::string name;             // "prompt 'p7'", "feature #12", "window #3"
  std::int64_t tokens = 0;      // input tokens
  std::int64_t new_tokens = 0;  // generate: tokens still to come (the KV cache holds tokens + new_tokens)
};

struct BatchBytes {
  std::uint64_t kv_cache = 0, scores = 0, logits = 0;
  std::uint64_t total() const { return kv_cache + scores + logits; }
};

// The estimate for `batch` sequences like `s` (every one padded to its length) in `spec`'s task.
BatchBytes batch_bytes(const RunSpec& spec, const ModelDims& m, const SequenceNeed& s, std::int64_t batch);

// run.max_batch_bytes, or when 0 half the physical memory divided by the ranks on this node
// (OMPI_COMM_WORLD_LOCAL_SIZE / SLURM_NTASKS_PER_NODE, 1 without either).
std::uint64_t max_batch_bytes(const RunSpec& spec);

// The checks above; `seqs` is this rank's shard. Returns the positions line it logged ("" = none).
std::string check_input_limits(const RunSpec& spec, const ModelDims& m, const std::vector<SequenceNeed>& seqs);

// The flows' one call each, from load() once the model is loaded: this rank's shard.
struct GenerationItem;
struct PerplexityWindow;
struct EncoderItem;
void check_decoder_inputs(const RunSpec& spec, const ModelDims& m, const std::vector<GenerationItem>& prompts,
                          const std::vector<PerplexityWindow>& windows);
void check_encoder_inputs(const RunSpec& spec, const ModelDims& m, const std::vector<EncoderItem>& features);

}  // namespace evalrun
