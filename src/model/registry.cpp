#include "model/registry.hpp"

#include <filesystem>

#include "common/errors.hpp"
#include "model/llama.hpp"
#include "model/loader_util.hpp"
#include "model/roberta.hpp"

namespace evalrun {
namespace {

template <class M>
std::unique_ptr<Model> build(const ModelLoad& how) {
  return M::load(how);
}

std::string supported_list() {
  std::string s;
  for (const auto& a : architectures()) s += std::string(s.empty() ? "" : ", ") + a.name;
  return s;
}

}  // namespace

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> rows = {
      {"RobertaForQuestionAnswering", "roberta", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"RobertaForMaskedLM", "roberta", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"XLMRobertaForQuestionAnswering", "xlm-roberta", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"XLMRobertaForMaskedLM", "xlm-roberta", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"BertForQuestionAnswering", "bert", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"BertForMaskedLM", "bert", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"DistilBertForQuestionAnswering", "distilbert", ModelRole::encoder, build<RobertaModel>, RobertaModel::dims_of},
      {"LlamaForCausalLM", "llama", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"GraniteForCausalLM", "granite", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"MistralForCausalLM", "mistral", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"Qwen2ForCausalLM", "qwen2", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"MixtralForCausalLM", "mixtral", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"GemmaForCausalLM", "gemma", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"Starcoder2ForCausalLM", "starcoder2", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"GPTBigCodeForCausalLM", "gpt_bigcode", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
      {"GPT2LMHeadModel", "gpt2", ModelRole::decoder, build<LlamaModel>, LlamaModel::dims_of},
  };
  return rows;
}

const Architecture& find_architecture(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json j = model::read_config_json(path);
  auto arch = j.find("architectures");
  if (arch == j.end() || arch->is_null()) throw InputError(path + ": architectures", "missing");
  if (!arch->is_array() || arch->size() != 1 || !(*arch)[0].is_string()) {
    throw InputError(path + ": architectures", "expected a list of exactly one architecture name (supported: " +
                                                   supported_list() + ")");
  }
  const std::string name = (*arch)[0].get<std::string>();
  const std::string model_type = model::json_string(j, path, "model_type", "");
  for (const auto& a : architectures()) {
    if (name != a.name) continue;
    if (model_type != a.model_type) {
      throw InputError(path + ": model_type", "'" + model_type + "' does not match architectures '" + name +
                                                  "' (expected model_type '" + a.model_type + "')");
    }
    return a;
  }
  throw InputError(path + ": architectures", "'" + name + "' is not supported (supported: " + supported_list() + ")");
}

ModelDims checkpoint_dims(const std::string& dir) { return find_architecture(dir).dims(dir); }

std::unique_ptr<Model> load_model(const ModelLoad& how, ModelRole role) {
  const Architecture& a = find_architecture(how.dir);
  if (a.role != role) {
    throw InputError((std::filesystem::path(how.dir) / "config.json").string() + ": architectures",
                     std::string("'") + a.name + "' is " + (a.role == ModelRole::encoder ? "an " : "a ") +
                         to_string(a.role) + " model, but this run needs " +
                         (role == ModelRole::encoder ? "an " : "a ") + to_string(role) + " model");
  }
  return a.load(how);
}

std::unique_ptr<EncoderModel> load_encoder(const ModelLoad& how) {
  return std::unique_ptr<EncoderModel>(static_cast<EncoderModel*>(load_model(how, ModelRole::encoder).release()));
}

std::unique_ptr<CausalLM> load_causal_lm(const ModelLoad& how) {
  return std::unique_ptr<CausalLM>(static_cast<CausalLM*>(load_model(how, ModelRole::decoder).release()));
}

}  // namespace evalrun
