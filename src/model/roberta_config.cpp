// config.json parsing and validation for RoBERTa, the head registry and the thread setting.
#include <nlohmann/json.hpp>
#include <torch/torch.h>


#include "common/errors.hpp"
#include "model/loader_util.hpp"
#include "model/roberta.hpp"

namespace evalrun {
namespace {

using nlohmann::json;
using model::json_int;
using model::json_string;

std::int64_t get_int(const json& j, const std::string& path, const char* key, bool required, std::int64_t fallback,
                     std::int64_t min_value) {
  return json_int(j, path, key, required, fallback, min_value);
}

std::string get_string(const json& j, const std::string& path, const char* key, const std::string& fallback) {
  return json_string(j, path, key, fallback);
}

}  // namespace

RobertaConfig RobertaConfig::from_json_file(const std::string& path) {
  const json j = model::read_config_json(path);

  RobertaConfig c;
  const std::string model_type = get_string(j, path, "model_type", "roberta");
  if (model_type != "roberta") {
    throw InputError(path + ": model_type", "'" + model_type + "' is not a RoBERTa model (expected \"roberta\")");
  }
  c.vocab_size = get_int(j, path, "vocab_size", true, 0, 1);
  c.hidden_size = get_int(j, path, "hidden_size", true, 0, 1);
  c.num_hidden_layers = get_int(j, path, "num_hidden_layers", true, 0, 1);
  c.num_attention_heads = get_int(j, path, "num_attention_heads", true, 0, 1);
  c.intermediate_size = get_int(j, path, "intermediate_size", true, 0, 1);
  c.max_position_embeddings = get_int(j, path, "max_position_embeddings", true, 0, 1);
  c.type_vocab_size = get_int(j, path, "type_vocab_size", false, 2, 1);
  c.pad_token_id = get_int(j, path, "pad_token_id", false, 1, 0);

  if (auto it = j.find("layer_norm_eps"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) throw InputError(path + ": layer_norm_eps", "must be a number, got " + it->dump());
    c.layer_norm_eps = it->get<double>();
    if (!(c.layer_norm_eps > 0.0)) throw InputError(path + ": layer_norm_eps", "must be > 0");
  } else {
    c.layer_norm_eps = 1e-12;  // HF RobertaConfig default
  }
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw InputError(path + ": tie_word_embeddings", "must be true or false");
    c.tie_word_embeddings = it->get<bool>();
  }

  c.hidden_act = get_string(j, path, "hidden_act", "gelu");
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_new" && c.hidden_act != "gelu_pytorch_tanh" &&
      c.hidden_act != "relu") {
    throw InputError(path + ": hidden_act",
                     "'" + c.hidden_act + "' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, relu)");
  }
  const std::string pos_type = get_string(j, path, "position_embedding_type", "absolute");
  if (pos_type != "absolute") {
    throw InputError(path + ": position_embedding_type", "'" + pos_type + "' is not supported (only \"absolute\")");
  }
  if (auto it = j.find("is_decoder"); it != j.end() && it->is_boolean() && it->get<bool>()) {
    throw InputError(path + ": is_decoder", "decoder (causal) RoBERTa is not supported");
  }

  if (c.hidden_size % c.num_attention_heads != 0) {
    throw InputError(path + ": num_attention_heads", "hidden_size " + std::to_string(c.hidden_size) +
                                                         " is not a multiple of num_attention_heads " +
                                                         std::to_string(c.num_attention_heads));
  }
  if (c.pad_token_id >= c.vocab_size) throw InputError(path + ": pad_token_id", "must be < vocab_size");
  if (c.max_sequence_length() < 1) {
    throw InputError(path + ": max_position_embeddings", "must be > pad_token_id + 1 (positions start there)");
  }

  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) throw InputError(path + ": architectures", "missing");
  if (!it->is_array()) throw InputError(path + ": architectures", "must be a list of strings");
  for (const auto& a : *it) {
    if (!a.is_string()) throw InputError(path + ": architectures", "must be a list of strings");
    c.architectures.push_back(a.get<std::string>());
  }
  head_from_architectures(c.architectures, path + ": architectures");  // validates
  return c;
}

const char* roberta_architecture(EncoderHead h) {
  switch (h) {
    case EncoderHead::question_answering: return "RobertaForQuestionAnswering";
    case EncoderHead::masked_lm: return "RobertaForMaskedLM";
  }
  return "?";
}

EncoderHead head_from_architectures(const std::vector<std::string>& architectures, const std::string& where) {
  if (architectures.size() != 1) {
    throw InputError(where, "expected exactly one architecture, got " + std::to_string(architectures.size()) +
                                " (supported: RobertaForQuestionAnswering, RobertaForMaskedLM)");
  }
  const std::string& a = architectures[0];
  if (a == "RobertaForQuestionAnswering") return EncoderHead::question_answering;
  if (a == "RobertaForMaskedLM") return EncoderHead::masked_lm;
  throw InputError(where, "'" + a + "' is not supported (supported: RobertaForQuestionAnswering, RobertaForMaskedLM)");
}

}  // namespace evalrun
