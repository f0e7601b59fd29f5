// The model interface: what runs, quantization, devices and tensor parallelism ask of a model,
// whatever its architecture. Two role views: EncoderModel (a bidirectional encoder with token-level
// heads) and CausalLM (prefill / decode over a key/value cache). registry.hpp maps a checkpoint's
// config.json to the architecture that builds one. Plain C++: torch stays inside the architectures.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/run_spec.hpp"
#include "quant/linear.hpp"

namespace evalrun {

class Communicator;
namespace model {
struct Weights;
}

// How a checkpoint is loaded.
struct ModelLoad {
  std::string dir;  // Hugging Face checkpoint directory (config.json + safetensors)
  DType dtype = DType::fp32;
  // Where the model's tensors live and compute, a torch device string: "cpu", or "cuda:1" for
  // model.device = "cuda" (device::Backend::model_device). Weights are read on the host and moved there
  // once; weights, activations, attention, norms and the KV cache then stay there, and only the
  // outputs (logits, hidden states) come back to the host.
  std::string device = "cpu";
  // The run's [quantization] method: "auto" takes whatever the checkpoint holds; otherwise it must
  // match (InputError naming quantization.method). "none" for a float checkpoint to quantize.
  std::string quantization_method = "auto";
  // The tensor-parallel group this rank belongs to (null or size 1: the whole model). The model then
  // holds only this rank's part of the projections and every rank of the group runs the same inputs.
  Communicator* tp = nullptr;
  // Off the host with an MPI that takes device memory (a CUDA-aware Open MPI): waits until the device
  // has finished the work queued so far, after which `tp`'s all-reduce is handed device memory.
  // Empty: the partial sums are staged through host memory (a copy that waits by itself).
  std::function<void()> device_sync{};
};

// The sizes that say what a batch costs and how long a sequence may be (task/input_limits.hpp).
struct ModelDims {
  std::string config_json;  // for messages
  std::int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  std::int64_t max_positions = 0;  // tokens the position table covers (learned) or max_position_embeddings (rotary)
  bool rotary = false;             // rotary positions: no table, sequences may run past max_positions
  // rope_scaling "dynamic" (NTK): the rotary base grows for rows past max_positions, the scaling's
  // purpose, so running past them is expected rather than warned about.
  bool rope_extends = false;
  // Sliding-window attention (Mistral, Starcoder2, ...): a query at cache slot i sees keys from slot
  // i - sliding_window on; 0 = none. Counted in cache slots, so a caller that leaves gaps in a row's
  // cache (task/multiple_choice.cpp's shared context) must keep the row within the window.
  std::int64_t sliding_window = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual ModelDims dims() const = 0;

  // The config.json "architectures" entry it was built from ("LlamaForCausalLM", ...).
  virtual std::string architecture() const = 0;
  virtual std::int64_t vocab_size() const = 0;

  // The projections of the layers, for quantization tools (calibration, direct quantization, memory
  // reports) and device backends. Each site is one Linear the forward pass calls; it holds the
  // checkpoint layers `prefixes` side by side (q | k | v), `part_out[i]` outputs each.
  // replace_linear swaps one for a layer with the same in / out features (any storage) and returns
  // the layer it replaced (calibration wraps a layer and restores it).
  std::vector<quant::LinearSite> linear_sites();
  quant::LinearPtr replace_linear(std::size_t site, quant::LinearPtr layer);

  // How the checkpoint's layers are stored ("none", "gptq w4 g32 asym act_order", ...).
  std::string quantization() const;
  // What the arithmetic runs in: "float32", "bfloat16" or "float16".
  const char* compute_dtype() const;
  // Where the model's weights are ("cpu", "cuda:0"), read off every tensor and float layer it holds:
  // ModelLoad::device after a load; "mixed (cpu, cuda:0)" would be a bug.
  std::string device() const;
  // Bytes of weights this rank holds (projections, embeddings, norms, heads).
  std::size_t weight_bytes() const;

  // Runs `batch` unpadded rows of `seq` tokens through every layer, outputs discarded: the
  // calibration passes of quantization (direct INT8 statistics, static FP8 scales). type_ids: the
  // rows' token types as the task feeds them (BERT's question / context pairs), or nullptr for all 0;
  // a model without token types ignores them.
  virtual void calibration_pass(const std::int64_t* ids, const std::int64_t* type_ids, std::int64_t batch,
                                std::int64_t seq) = 0;

 protected:
  // The architecture's loaded state (model/weights.hpp), which answers the five questions above.
  virtual model::Weights& weights() const = 0;
};

enum class EncoderHead { question_answering, masked_lm };

// A bidirectional encoder with a token-level head. Inputs: ids and attention mask, row-major
// [batch, seq] int64, right padding (mask 1 = token, 0 = padding). type_ids: the token type
// (segment) ids, [batch, seq] as well, or nullptr for all 0; a model without token types (RoBERTa's
// single row, DistilBERT) ignores them, as transformers does when the tokenizer gives none.
class EncoderModel : public Model {
 public:
  virtual EncoderHead head() const = 0;
  virtual std::int64_t pad_token_id() const = 0;
  // Longest input (tokens per row) the position table allows.
  virtual std::int64_t max_sequence_length() const = 0;
  // Whether the model adds token type embeddings (BERT): then type_ids change the result.
  virtual bool uses_token_types() const = 0;

  // QA: start and end logits, float32 [batch, seq] each (padding positions hold values too).
  virtual void question_answering(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids,
                                  std::int64_t batch, std::int64_t seq, std::vector<float>& start,
                                  std::vector<float>& end) = 0;
  // MLM: logits float32 [positions.size(), vocab] at the given (row, position) pairs only.
  virtual void masked_lm(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids,
                         std::int64_t batch, std::int64_t seq,
                         const std::vector<std::pair<std::int64_t, std::int64_t>>& positions,
                         std::vector<float>& logits) = 0;
  // Hidden states (float32) after the embeddings and after each layer: [layers + 1][batch * seq * hidden].
  virtual std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, const std::int64_t* mask,
                                                        const std::int64_t* type_ids, std::int64_t batch,
                                                        std::int64_t seq) = 0;

  // The same with all token types 0.
  void question_answering(const std::int64_t* ids, const std::int64_t* mask, std::int64_t batch, std::int64_t seq,
                          std::vector<float>& start, std::vector<float>& end) {
    question_answering(ids, mask, nullptr, batch, seq, start, end);
  }
  void masked_lm(const std::int64_t* ids, const std::int64_t* mask, std::int64_t batch, std::int64_t seq,
                 const std::vector<std::pair<std::int64_t, std::int64_t>>& positions, std::vector<float>& logits) {
    masked_lm(ids, mask, nullptr, batch, seq, positions, logits);
  }
  std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, const std::int64_t* mask, std::int64_t batch,
                                                std::int64_t seq) {
    return hidden_states(ids, mask, nullptr, batch, seq);
  }

  void calibration_pass(const std::int64_t* ids, const std::int64_t* type_ids, std::int64_t batch,
                        std::int64_t seq) override;

  // quantization.attention = "bf16": the attention's two products (scores, context) on bfloat16
  // operands with float32 accumulation, about twice the float32 rate on a CPU with AVX512-BF16; a
  // mixed-precision choice for float32-compute runs (INT8 above all, whose attention is then the larger
  // part of a forward pass). InputError naming the key where it cannot run (no AVX512-BF16, a model
  // off the host). Returns its description for the result file.
  virtual std::string use_bf16_attention_products() = 0;
};

// The key/value cache of one batch: `batch` rows, room for `capacity` positions per row. Made by
// CausalLM::new_cache; what it holds is the architecture's business.
class KvCache {
 public:
  virtual ~KvCache() = default;
  std::int64_t batch() const { return batch_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t length() const { return length_; }  // positions filled so far (same for all rows)

 protected:
  KvCache(std::int64_t batch, std::int64_t capacity) : batch_(batch), capacity_(capacity) {}
  std::int64_t batch_, capacity_, length_ = 0;
};

// A decoder-only language model.
class CausalLM : public Model {
 public:
  virtual std::unique_ptr<KvCache> new_cache(std::int64_t batch, std::int64_t capacity) const = 0;

  // Appends `seq` tokens per row to the cache and runs them.
  //   ids, positions: [batch, seq] row-major; positions are the rotary positions (left padding: pads
  //     get 0, real tokens 0, 1, 2, ... from their first real token).
  //   key_mask: [batch, cache.length() + seq], 1 = attend, 0 = padding: a query attends to key j when
  //     key_mask[j] == 1 and j <= its own index (causal).
  //   logits: float32 out; all_positions = false -> [batch, vocab] for the last of the `seq` tokens;
  //     true -> [batch, seq, vocab].
  virtual void forward(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                       std::int64_t batch, std::int64_t seq, KvCache& cache, bool all_positions,
                       std::vector<float>& logits) = 0;

  // For tests: hidden states [layers + 1][batch * seq * hidden] as transformers' output_hidden_states
  // (the last one after the final norm). No cache, no padding.
  virtual std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, std::int64_t batch,
                                                        std::int64_t seq) = 0;

  void calibration_pass(const std::int64_t* ids, const std::int64_t* type_ids, std::int64_t batch,
                        std::int64_t seq) override;

  // quantization.lm_head = "int8": the output projection becomes INT8 W8A8 (per-channel symmetric
  // weights, per-token dynamic activations, as quantization.direct does the projections), in memory.
  // Returns its description for the result file.
  virtual std::string quantize_lm_head_int8() = 0;
};

// Threads used by torch's intra-op pool (and oneDNN / OpenBLAS through it) for this process.
// n <= 0 leaves the current setting. torch defaults to 1 thread in this build.
void set_compute_threads(int n);
int compute_threads();

}  // namespace evalrun
