// config.json parsing and validation for the encoder families (RoBERTa, XLM-R, BERT, DistilBERT): one row
// per model_type says what the family is and which config.json keys hold its sizes.
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "model/loader_util.hpp"
#include "model/roberta.hpp"

namespace evalrun {
namespace {

using nlohmann::json;
using model::json_int;
using model::json_string;

// The config.json keys of a family (DistilBERT names its sizes differently and has no
// layer_norm_eps, type_vocab_size or position_embedding_type).
struct ConfigKeys {
  const char *hidden, *layers, *heads, *intermediate, *act;
  const char* layer_norm_eps;    // nullptr: fixed
  double fixed_layer_norm_eps;   // when layer_norm_eps is nullptr
  double default_layer_norm_eps;
  bool token_types;              // type_vocab_size (default 2) is read
  std::int64_t default_pad;
};

struct FamilyRow {
  EncoderFamily family;
  ConfigKeys keys;
};

const FamilyRow kFamilies[] = {
    {{"roberta", "RobertaForQuestionAnswering", "RobertaForMaskedLM", "roberta.", true, false,
      "embeddings.LayerNorm", "embeddings.token_type_embeddings", "encoder.layer.", "attention.self.query",
      "attention.self.key", "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
      "intermediate.dense", "output.dense", "output.LayerNorm", "lm_head.dense", "lm_head.layer_norm", "lm_head.bias",
      "lm_head.decoder"},
     {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act", "layer_norm_eps",
      0.0, 1e-12, true, 1}},
    // XLM-RoBERTa is RoBERTa's architecture under its own names.
    {{"xlm-roberta", "XLMRobertaForQuestionAnswering", "XLMRobertaForMaskedLM", "roberta.", true, false,
      "embeddings.LayerNorm", "embeddings.token_type_embeddings", "encoder.layer.", "attention.self.query",
      "attention.self.key", "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
      "intermediate.dense", "output.dense", "output.LayerNorm", "lm_head.dense", "lm_head.layer_norm", "lm_head.bias",
      "lm_head.decoder"},
     {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act", "layer_norm_eps",
      0.0, 1e-12, true, 1}},
    {{"bert", "BertForQuestionAnswering", "BertForMaskedLM", "bert.", false, true, "embeddings.LayerNorm",
      "embeddings.token_type_embeddings", "encoder.layer.", "attention.self.query", "attention.self.key",
      "attention.self.value", "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
      "output.dense", "output.LayerNorm", "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
      "cls.predictions.bias", "cls.predictions.decoder"},
     {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act", "layer_norm_eps",
      0.0, 1e-12, true, 0}},
    // DistilBertForMaskedLM (vocab_transform / vocab_projector) has no row yet.
    {{"distilbert", "DistilBertForQuestionAnswering", nullptr, "distilbert.", false, false, "embeddings.LayerNorm",
      nullptr, "transformer.layer.", "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
      "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm", nullptr, nullptr, nullptr, nullptr},
     {"dim", "n_layers", "n_heads", "hidden_dim", "activation", nullptr, 1e-12, 1e-12, false, 0}},
};

std::string family_list() {
  std::string s;
  for (const auto& f : kFamilies) s += std::string(s.empty() ? "\"" : ", \"") + f.family.model_type + "\"";
  return s;
}

std::string supported_heads(const EncoderFamily& f) {
  std::string s = f.qa_architecture != nullptr ? f.qa_architecture : "";
  if (f.mlm_architecture != nullptr) s += (s.empty() ? "" : ", ") + std::string(f.mlm_architecture);
  return s;
}

}  // namespace

RobertaConfig RobertaConfig::from_json_file(const std::string& path) {
  const json j = model::read_config_json(path);

  RobertaConfig c;
  const std::string model_type = json_string(j, path, "model_type", "roberta");
  const FamilyRow* row = nullptr;
  for (const auto& f : kFamilies) {
    if (model_type == f.family.model_type) row = &f;
  }
  if (row == nullptr) {
    throw InputError(path + ": model_type", "'" + model_type + "' is not an encoder evalrun runs (supported: " +
                                                family_list() + ")");
  }
  c.family = &row->family;
  const ConfigKeys& k = row->keys;
  c.vocab_size = json_int(j, path, "vocab_size", true, 0, 1);
  c.hidden_size = json_int(j, path, k.hidden, true, 0, 1);
  c.num_hidden_layers = json_int(j, path, k.layers, true, 0, 1);
  c.num_attention_heads = json_int(j, path, k.heads, true, 0, 1);
  c.intermediate_size = json_int(j, path, k.intermediate, true, 0, 1);
  c.max_position_embeddings = json_int(j, path, "max_position_embeddings", true, 0, 1);
  c.type_vocab_size = k.token_types ? json_int(j, path, "type_vocab_size", false, 2, 1) : 0;
  c.pad_token_id = json_int(j, path, "pad_token_id", false, k.default_pad, 0);

  if (k.layer_norm_eps == nullptr) {
    c.layer_norm_eps = k.fixed_layer_norm_eps;  // DistilBERT's LayerNorms use eps 1e-12, not configurable
  } else {
    c.layer_norm_eps = model::json_number(j, path, k.layer_norm_eps, k.default_layer_norm_eps);
    if (!(c.layer_norm_eps > 0.0)) throw InputError(path + ": " + k.layer_norm_eps, "must be > 0");
  }
  c.tie_word_embeddings = model::json_bool(j, path, "tie_word_embeddings", true);

  c.hidden_act = json_string(j, path, k.act, "gelu");
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_new" && c.hidden_act != "gelu_pytorch_tanh" &&
      c.hidden_act != "relu") {
    throw InputError(path + ": " + k.act,
                     "'" + c.hidden_act + "' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, relu)");
  }
  const std::string pos_type = json_string(j, path, "position_embedding_type", "absolute");
  if (pos_type != "absolute") {
    throw InputError(path + ": position_embedding_type", "'" + pos_type + "' is not supported (only \"absolute\")");
  }
  if (model::json_bool(j, path, "sinusoidal_pos_embds", false)) {
    throw InputError(path + ": sinusoidal_pos_embds", "true is not supported (only learned position embeddings)");
  }
  if (model::json_bool(j, path, "is_decoder", false)) {
    throw InputError(path + ": is_decoder", "decoder (causal) encoders are not supported");
  }

  if (c.hidden_size % c.num_attention_heads != 0) {
    throw InputError(path + ": " + k.heads, std::string(k.hidden) + " " + std::to_string(c.hidden_size) +
                                                " is not a multiple of " + k.heads + " " +
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
  head_from_architectures(*c.family, c.architectures, path + ": architectures");  // validates
  return c;
}

const char* encoder_architecture(const EncoderFamily& f, EncoderHead h) {
  const char* name = h == EncoderHead::question_answering ? f.qa_architecture : f.mlm_architecture;
  return name != nullptr ? name : "?";
}

EncoderHead head_from_architectures(const EncoderFamily& f, const std::vector<std::string>& architectures,
                                    const std::string& where) {
  if (architectures.size() != 1) {
    throw InputError(where, "expected exactly one architecture, got " + std::to_string(architectures.size()) +
                                " (supported: " + supported_heads(f) + ")");
  }
  const std::string& a = architectures[0];
  if (f.qa_architecture != nullptr && a == f.qa_architecture) return EncoderHead::question_answering;
  if (f.mlm_architecture != nullptr && a == f.mlm_architecture) return EncoderHead::masked_lm;
  throw InputError(where, "'" + a + "' is not supported for model_type '" + f.model_type +
                              "' (supported: " + supported_heads(f) + ")");
}

}  // namespace evalrun
