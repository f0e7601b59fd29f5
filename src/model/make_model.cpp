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
  void layer_norm(const std::string& prefix, std::int64_t n) {
    constant(prefix + ".weight", {n}, 1.0f);
    constant(prefix + ".bias", {n}, 0.0f);
  }
  std::vector<TensorToWrite>& tensors() { return tensors_; }

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

}  // namespace

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

  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  std::ofstream out(cfg_path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(cfg_path, "cannot write");
  out << cfg.dump(2) << "\n";
  out.close();
  if (!out) throw InputError(cfg_path, "write failed");
  write_safetensors((fs::path(dir) / "model.safetensors").string(), w.tensors());
}

}  // namespace evalrun
