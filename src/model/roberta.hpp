// The BERT-style post-LayerNorm encoder (RoBERTa, XLM-R, BERT, DistilBERT) with a question-answering
// or masked-LM head, loaded from a Hugging Face checkpoint directory (config.json + safetensors) and
// run on the CPU with libtorch. The numerics follow transformers' RobertaFor*, XLMRobertaFor*, BertFor*
// and DistilBertForQuestionAnswering in eval mode (eager attention). The families differ only in facts
// (an EncoderFamily row: positions, token types, tensor names, config keys), not in their forward
// pass. Torch stays behind a pimpl: this header is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/model.hpp"

namespace evalrun {

// What one encoder family is (a row per config.json model_type in roberta_config.cpp).
struct EncoderFamily {
  const char* model_type;        // "roberta", "xlm-roberta", "bert", "distilbert"
  const char* qa_architecture;   // "RobertaForQuestionAnswering"; nullptr: no such head here
  const char* mlm_architecture;  // "RobertaForMaskedLM"; nullptr: no such head here
  const char* prefix;            // encoder tensors' prefix in a checkpoint with a head: "roberta."
  // RoBERTa numbers non-pad tokens from pad_token_id + 1 (create_position_ids_from_input_ids);
  // BERT and DistilBERT use 0 .. seq-1.
  bool positions_after_padding;
  // BERT's MLM transform applies hidden_act; RoBERTa's lm_head always the exact GELU.
  bool mlm_head_hidden_act;
  // Tensor names below the prefix ({i} = layer index follows `layers`), and the head's (unprefixed).
  const char* embeddings_norm;  // "embeddings.LayerNorm"
  const char* type_embeddings;  // "embeddings.token_type_embeddings"; nullptr: no token types
  const char* layers;           // "encoder.layer."
  const char *query, *key, *value, *attn_out, *attn_norm, *inter, *out, *out_norm;
  const char *mlm_dense, *mlm_norm, *mlm_bias, *mlm_decoder;
};

// The config.json fields the encoder needs. from_json_file validates them; every error is an
// InputError naming config.json and the key.
struct RobertaConfig {
  const EncoderFamily* family = nullptr;  // from model_type
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t max_position_embeddings = 0;
  std::int64_t type_vocab_size = 1;  // 0: the family has no token type embeddings
  std::int64_t pad_token_id = 1;
  double layer_norm_eps = 1e-5;
  std::string hidden_act = "gelu";  // "gelu" (exact erf), "gelu_new" / "gelu_pytorch_tanh", "relu"
  bool tie_word_embeddings = true;  // MLM decoder weight = word embeddings (HF default)
  std::vector<std::string> architectures;

  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Longest input the position table allows (RoBERTa: positions run from pad_token_id + 1).
  std::int64_t max_sequence_length() const {
    return family->positions_after_padding ? max_position_embeddings - pad_token_id - 1 : max_position_embeddings;
  }

  static RobertaConfig from_json_file(const std::string& path);
};

// The head named by config.json "architectures" for the family (RobertaForQuestionAnswering ->
// question_answering, BertForMaskedLM -> masked_lm, ...); anything else is an InputError listing the
// family's supported ones.
EncoderHead head_from_architectures(const EncoderFamily& family, const std::vector<std::string>& architectures,
                                    const std::string& where);
// The architectures entry of a family's head ("RobertaForQuestionAnswering", "BertForMaskedLM").
const char* encoder_architecture(const EncoderFamily& family, EncoderHead head);

// RobertaForQuestionAnswering, RobertaForMaskedLM, XLMRobertaForQuestionAnswering,
// XLMRobertaForMaskedLM, BertForQuestionAnswering, BertForMaskedLM and DistilBertForQuestionAnswering
// (registry rows of the same names). One model replica. Not thread-safe: forward passes reuse internal work buffers (one model per rank / thread).
//
// Precision: fp32 computes in float32 (GEMMs through oneDNN's sgemm when the build found libdnnl).
// bf16 stores the weights in bfloat16 and runs the matrix products, bias adds, residuals and
// activations in bfloat16 like HF's model.to(torch.bfloat16) (products through oneDNN, with AMX
// where the CPU has it); LayerNorm and softmax take bfloat16 in and give bfloat16 out but compute
// in float32, as torch's own bfloat16 kernels do. fp16: this torch has no float16 matrix product on
// the CPU, so the weights are rounded to float16 at load (the precision of an fp16 checkpoint) and
// upcast to float32 once, at load; all compute is float32 and compute_dtype() says so, so result
// files can record it.
class RobertaModel : public EncoderModel {
 public:
  // Reads dir/config.json and the safetensors (single file or sharded with an index). Every expected
  // tensor must exist with the expected shape; unexpected tensors are an error except the ones HF
  // ignores (pooler, embeddings.position_ids, a tied decoder weight). Encoder names may carry the
  // family's prefix ("roberta." also for XLM-R, "bert.", "distilbert.") or not. The model is built on the host whatever the device; src/device takes
  // its projections over after load. Quantized checkpoints and tensor parallelism as LlamaModel::load.
  static std::unique_ptr<RobertaModel> load(const ModelLoad& how);
  ~RobertaModel() override;
  RobertaModel(const RobertaModel&) = delete;
  RobertaModel& operator=(const RobertaModel&) = delete;

  const RobertaConfig& config() const;
  DType dtype() const;  // as requested
  const std::string& dir() const;
  // SHA-256 over the checkpoint's safetensors files (contents and names, sorted by name).
  std::string weights_sha256() const;

  ModelDims dims() const override;
  // The same from dir/config.json alone (the registry row's dims).
  static ModelDims dims_of(const std::string& dir);
  std::string architecture() const override;
  std::int64_t vocab_size() const override;
  EncoderHead head() const override;
  std::int64_t pad_token_id() const override;
  std::int64_t max_sequence_length() const override;
  bool uses_token_types() const override;
  std::string use_bf16_attention_products() override;
  using EncoderModel::hidden_states;
  using EncoderModel::masked_lm;
  using EncoderModel::question_answering;
  // RoBERTa's position ids come from ids != pad_token_id, like HF. type_ids must be < type_vocab_size.
  void question_answering(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids,
                          std::int64_t batch, std::int64_t seq, std::vector<float>& start,
                          std::vector<float>& end) override;
  void masked_lm(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids, std::int64_t batch,
                 std::int64_t seq, const std::vector<std::pair<std::int64_t, std::int64_t>>& positions,
                 std::vector<float>& logits) override;
  // After the embeddings' LayerNorm and after each layer.
  std::vector<std::vector<float>> hidden_states(const std::int64_t* ids, const std::int64_t* mask,
                                                const std::int64_t* type_ids, std::int64_t batch,
                                                std::int64_t seq) override;

  struct Impl;

 protected:
  model::Weights& weights() const override;

 private:
  explicit RobertaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace evalrun
