#include "model/make_model.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "io/safetensors.hpp"

namespace evalrun {
namespace {

struct Preset {
  std::int64_t hidden, layers, heads, intermediate, max_pos, vocab;
};

Preset preset_by_name(const std::string& name) {
  if (name == "tiny") return {32, 2, 4, 64, 514, 1000};
  if (name == "roberta-base") return {768, 12, 12, 3072, 514, 50265};
  throw InputError("make-model: preset", "'" + name + "' is unknown (supported: tiny, roberta-base)");
}

class Writer {
 public:
  explicit Writer(std::uint64_t seed) : gen_(at::detail::createCPUGenerator(seed)) {}

  void normal(const std::string& name, std::vector<std::int64_t> shape, std::int64_t zero_row = -1) {
    torch::Tensor t = at::normal(0.0, 0.02, shape, gen_, torch::TensorOptions().dtype(torch::kFloat32));
    if (zero_row >= 0) t[zero_row].zero_();  // HF zeroes the padding_idx row of an embedding
    add(name, t);
  }
  void constant(const std::string& name, std::vector<std::int64_t> shape, float value) {
    add(name, torch::full(shape, value, torch::TensorOptions().dtype(torch::kFloat32)));
  }
  void linear(const std::string& prefix, std::int64_t out, std::int64_t in) {
    normal(prefix + ".weight", {out, in});
    normal(prefix + ".bias", {out});
  }
  void normal(const std::string& name, std::vector<std::int64_t> shape, double mean, double std) {
    add(name, at::normal(mean, std, shape, gen_, torch::TensorOptions().dtype(torch::kFloat32)));
  }
  void layer_norm(const std::string& prefix, std::int64_t n) {
    constant(prefix + ".weight", {n}, 1.0f);
    constant(prefix + ".bias", {n}, 0.0f);
  }
  std::vector<TensorToWrite>& tensors() { return tensors_; }
  const std::vector<TensorToWrite>& tensors() const { return tensors_; }

 private:
  void add(const std::string& name, const torch::Tensor& t) {
    TensorToWrite w;
    w.name = name;
    w.dtype = TensorDType::F32;
    w.shape = t.sizes().vec();
    w.data.resize(static_cast<std::size_t>(t.nbytes()));
    std::memcpy(w.data.data(), t.contiguous().data_ptr(), w.data.size());
    tensors_.push_back(std::move(w));
  }
  at::Generator gen_;
  std::vector<TensorToWrite> tensors_;
};

void write_json_file(const std::string& path, const nlohmann::ordered_json& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path, "cannot write");
  out << value.dump(2) << "\n";
  out.close();
  if (!out) throw InputError(path, "write failed");
}

void write_config_and_weights(const std::string& dir, const nlohmann::ordered_json& cfg, const Writer& w) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  write_json_file((fs::path(dir) / "config.json").string(), cfg);
  write_safetensors((fs::path(dir) / "model.safetensors").string(), w.tensors());
}

struct LlamaPreset {
  std::int64_t hidden, layers, heads, kv_heads, intermediate, max_pos, vocab;
  bool granite;
  double init_std;  // the tiny presets use a larger std than HF's 0.02 so attention is not uniform
};

LlamaPreset llama_preset_by_name(const std::string& name) {
  if (name == "tiny-llama") return {64, 2, 4, 2, 128, 512, 256, false, 0.1};
  if (name == "tiny-granite") return {64, 2, 4, 2, 128, 512, 256, true, 0.1};
  if (name == "llama-110m") return {768, 12, 12, 4, 2048, 2048, 32000, false, 0.02};
  throw InputError("make-model: preset", "'" + name + "' is unknown (supported: tiny-llama, tiny-granite, llama-110m)");
}

}  // namespace

std::vector<std::string> llama_presets() { return {"tiny-llama", "tiny-granite", "llama-110m"}; }

void make_llama_checkpoint(const std::string& dir, const std::string& preset, std::uint64_t seed,
                           std::int64_t vocab_size, const std::optional<SpecialTokenIds>& ids) {
  LlamaPreset p = llama_preset_by_name(preset);
  if (vocab_size != 0) {
    if (vocab_size < 3) {
      throw InputError("make-model: vocab_size",
                       "must be at least 3 (<unk>, <s>, </s>), got " + std::to_string(vocab_size));
    }
    p.vocab = vocab_size;
  }
  const std::int64_t H = p.hidden, I = p.intermediate, d = p.hidden / p.heads;

  nlohmann::ordered_json cfg;
  cfg["architectures"] = {p.granite ? "GraniteForCausalLM" : "LlamaForCausalLM"};
  cfg["attention_bias"] = false;
  cfg["attention_dropout"] = 0.0;
  const SpecialTokenIds special = ids.value_or(SpecialTokenIds{});
  cfg["bos_token_id"] = special.bos;
  if (p.granite) cfg["embedding_multiplier"] = 12.0;
  cfg["eos_token_id"] = special.eos;
  cfg["hidden_act"] = "silu";
  cfg["hidden_size"] = H;
  cfg["initializer_range"] = p.init_std;
  cfg["intermediate_size"] = I;
  if (p.granite) {
    cfg["attention_multiplier"] = 0.125;
    cfg["logits_scaling"] = 8.0;
  }
  cfg["max_position_embeddings"] = p.max_pos;
  cfg["mlp_bias"] = false;
  cfg["model_type"] = p.granite ? "granite" : "llama";
  cfg["num_attention_heads"] = p.heads;
  cfg["num_hidden_layers"] = p.layers;
  cfg["num_key_value_heads"] = p.kv_heads;
  if (special.pad >= 0) cfg["pad_token_id"] = special.pad;
  if (!p.granite) cfg["pretraining_tp"] = 1;
  if (p.granite) cfg["residual_multiplier"] = 0.22;
  cfg["rms_norm_eps"] = 1e-05;
  cfg["rope_scaling"] = nullptr;
  cfg["rope_theta"] = 10000.0;
  cfg["tie_word_embeddings"] = false;
  cfg["torch_dtype"] = "float32";
  cfg["transformers_version"] = "4.45.0";
  cfg["use_cache"] = true;
  cfg["vocab_size"] = p.vocab;

  torch::InferenceMode guard;
  Writer w(seed);
  w.normal("model.embed_tokens.weight", {p.vocab, H}, 0.0, p.init_std);
  for (std::int64_t i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    w.normal(l + "input_layernorm.weight", {H}, 1.0, 0.1);
    w.normal(l + "self_attn.q_proj.weight", {p.heads * d, H}, 0.0, p.init_std);
    w.normal(l + "self_attn.k_proj.weight", {p.kv_heads * d, H}, 0.0, p.init_std);
    w.normal(l + "self_attn.v_proj.weight", {p.kv_heads * d, H}, 0.0, p.init_std);
    w.normal(l + "self_attn.o_proj.weight", {H, p.heads * d}, 0.0, p.init_std);
    w.normal(l + "post_attention_layernorm.weight", {H}, 1.0, 0.1);
    w.normal(l + "mlp.gate_proj.weight", {I, H}, 0.0, p.init_std);
    w.normal(l + "mlp.up_proj.weight", {I, H}, 0.0, p.init_std);
    w.normal(l + "mlp.down_proj.weight", {H, I}, 0.0, p.init_std);
  }
  w.normal("model.norm.weight", {H}, 1.0, 0.1);
  w.normal("lm_head.weight", {p.vocab, H}, 0.0, p.init_std);
  write_config_and_weights(dir, cfg, w);
  if (ids) {
    nlohmann::ordered_json generation;
    generation["bos_token_id"] = special.bos;
    generation["eos_token_id"] = special.eos;
    if (special.pad >= 0) generation["pad_token_id"] = special.pad;
    write_json_file((std::filesystem::path(dir) / "generation_config.json").string(), generation);
  }
}

std::vector<std::string> roberta_presets() { return {"tiny", "roberta-base"}; }

void make_roberta_checkpoint(const std::string& dir, const std::string& preset, RobertaHead head, std::uint64_t seed,
                             std::int64_t vocab_size) {
  Preset p = preset_by_name(preset);
  if (vocab_size != 0) {
    if (vocab_size < 4) {
      throw InputError("make-model: vocab_size", "must be at least 4 (<s>, <pad>, </s>, <unk>), got " +
                                                     std::to_string(vocab_size));
    }
    p.vocab = vocab_size;
  }
  const std::int64_t pad = 1, H = p.hidden, I = p.intermediate;

  nlohmann::ordered_json cfg;
  cfg["architectures"] = {to_string(head)};
  cfg["attention_probs_dropout_prob"] = 0.1;
  cfg["bos_token_id"] = 0;
  cfg["classifier_dropout"] = nullptr;
  cfg["eos_token_id"] = 2;
  cfg["hidden_act"] = "gelu";
  cfg["hidden_dropout_prob"] = 0.1;
  cfg["hidden_size"] = H;
  cfg["initializer_range"] = 0.02;
  cfg["intermediate_size"] = I;
  cfg["layer_norm_eps"] = 1e-05;
  cfg["max_position_embeddings"] = p.max_pos;
  cfg["model_type"] = "roberta";
  cfg["num_attention_heads"] = p.heads;
  cfg["num_hidden_layers"] = p.layers;
  cfg["pad_token_id"] = pad;
  cfg["position_embedding_type"] = "absolute";
  cfg["torch_dtype"] = "float32";
  cfg["transformers_version"] = "4.39.0";
  cfg["type_vocab_size"] = 1;
  cfg["use_cache"] = true;
  cfg["vocab_size"] = p.vocab;

  torch::InferenceMode guard;
  Writer w(seed);
  w.normal("roberta.embeddings.word_embeddings.weight", {p.vocab, H}, pad);
  w.normal("roberta.embeddings.position_embeddings.weight", {p.max_pos, H}, pad);
  w.normal("roberta.embeddings.token_type_embeddings.weight", {1, H});
  w.layer_norm("roberta.embeddings.LayerNorm", H);
  for (std::int64_t i = 0; i < p.layers; ++i) {
    const std::string l = "roberta.encoder.layer." + std::to_string(i) + ".";
    w.linear(l + "attention.self.query", H, H);
    w.linear(l + "attention.self.key", H, H);
    w.linear(l + "attention.self.value", H, H);
    w.linear(l + "attention.output.dense", H, H);
    w.layer_norm(l + "attention.output.LayerNorm", H);
    w.linear(l + "intermediate.dense", I, H);
    w.linear(l + "output.dense", H, I);
    w.layer_norm(l + "output.LayerNorm", H);
  }
  if (head == RobertaHead::question_answering) {
    w.linear("qa_outputs", 2, H);
  } else {
    w.linear("lm_head.dense", H, H);
    w.layer_norm("lm_head.layer_norm", H);
    w.normal("lm_head.bias", {p.vocab});
  }

  write_config_and_weights(dir, cfg, w);
}

}  // namespace evalrun
