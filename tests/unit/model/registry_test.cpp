// The model registry: every row loads a checkpoint of its architecture through load_model and the
// role views; unknown architectures, a model_type that does not match, and a checkpoint of the
// other role are InputErrors naming config.json, the key and the value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <functional>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "model/registry.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Registry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(testing::make_temp_dir("evalrun-registry-test"));
    make_roberta_checkpoint(dir("RobertaForQuestionAnswering"), "tiny", EncoderHead::question_answering, 1, 50);
    make_roberta_checkpoint(dir("RobertaForMaskedLM"), "tiny", EncoderHead::masked_lm, 2, 50);
    make_roberta_checkpoint(dir("XLMRobertaForQuestionAnswering"), "tiny-xlmr", EncoderHead::question_answering, 11, 50);
    make_roberta_checkpoint(dir("XLMRobertaForMaskedLM"), "tiny-xlmr", EncoderHead::masked_lm, 12, 50);
    make_roberta_checkpoint(dir("BertForQuestionAnswering"), "tiny-bert", EncoderHead::question_answering, 8, 50);
    make_roberta_checkpoint(dir("BertForMaskedLM"), "tiny-bert", EncoderHead::masked_lm, 9, 50);
    make_roberta_checkpoint(dir("DistilBertForQuestionAnswering"), "tiny-distilbert", EncoderHead::question_answering,
                            10, 50);
    make_llama_checkpoint(dir("LlamaForCausalLM"), "tiny-llama", 3, 50);
    make_llama_checkpoint(dir("GraniteForCausalLM"), "tiny-granite", 4, 50);
    make_llama_checkpoint(dir("MistralForCausalLM"), "tiny-mistral", 5, 50);
    make_llama_checkpoint(dir("Qwen2ForCausalLM"), "tiny-qwen2", 6, 50);
    make_llama_checkpoint(dir("MixtralForCausalLM"), "tiny-mixtral", 7, 50);
    make_llama_checkpoint(dir("GemmaForCausalLM"), "tiny-gemma", 8, 50);
    make_llama_checkpoint(dir("Starcoder2ForCausalLM"), "tiny-starcoder2", 8, 50);
    make_llama_checkpoint(dir("GPTBigCodeForCausalLM"), "tiny-gpt-bigcode", 9, 50);
    make_llama_checkpoint(dir("GPT2LMHeadModel"), "tiny-gpt2", 10, 50);
  }
  static void TearDownTestSuite() {
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (root_ == nullptr) return;
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string dir(const std::string& name) { return (*root_ / name).string(); }

  // A copy of the checkpoint `src` with config.json edited.
  static std::string edited(const std::string& src, const std::string& name, const std::function<void(json&)>& edit) {
    const fs::path d = *root_ / name;
    fs::create_directories(d);
    fs::copy_file(fs::path(dir(src)) / "model.safetensors", d / "model.safetensors", fs::copy_options::overwrite_existing);
    json cfg = json::parse(std::ifstream(fs::path(dir(src)) / "config.json"));
    edit(cfg);
    std::ofstream(d / "config.json") << cfg.dump();
    return d.string();
  }

  static std::string load_error(const std::string& d, ModelRole role) {
    try {
      load_model({d}, role);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  static fs::path* root_;
};
fs::path* Registry::root_ = nullptr;

TEST_F(Registry, EveryRowLoadsItsArchitectureWithItsRole) {
  std::set<std::string> names;
  for (const auto& a : architectures()) {
    SCOPED_TRACE(a.name);
    EXPECT_TRUE(names.insert(a.name).second) << "two rows for " << a.name;
    EXPECT_EQ(&find_architecture(dir(a.name)), &a);
    auto model = load_model({dir(a.name)}, a.role);
    EXPECT_EQ(model->architecture(), a.name);
    EXPECT_EQ(model->vocab_size(), 50);
    EXPECT_FALSE(model->linear_sites().empty());
    // The row's config-only sizes are the loaded model's.
    const ModelDims before = checkpoint_dims(dir(a.name)), loaded = model->dims();
    EXPECT_EQ(before.config_json, loaded.config_json);
    EXPECT_EQ(before.layers, loaded.layers);
    EXPECT_EQ(before.heads, loaded.heads);
    EXPECT_EQ(before.kv_heads, loaded.kv_heads);
    EXPECT_EQ(before.vocab, 50);
    EXPECT_EQ(before.max_positions, loaded.max_positions);
    // GPT-2 and GPTBigCode have a learned position table; the other decoders rotary positions.
    const bool learned = a.name == std::string("GPT2LMHeadModel") || a.name == std::string("GPTBigCodeForCausalLM");
    EXPECT_EQ(before.rotary, a.role == ModelRole::decoder && !learned);
    EXPECT_EQ(before.rotary, loaded.rotary);
    EXPECT_GT(model->weight_bytes(), 0u);
    if (a.role == ModelRole::encoder) {
      EXPECT_NE(dynamic_cast<EncoderModel*>(model.get()), nullptr);
      EXPECT_NE(load_encoder({dir(a.name)}), nullptr);
    } else {
      EXPECT_NE(dynamic_cast<CausalLM*>(model.get()), nullptr);
      EXPECT_NE(load_causal_lm({dir(a.name)}), nullptr);
    }
  }
  EXPECT_EQ(names.size(), 16u);
}

TEST_F(Registry, ACheckpointOfTheOtherRoleIsRefused) {
  std::string e = load_error(dir("LlamaForCausalLM"), ModelRole::encoder);
  EXPECT_NE(e.find("config.json: architectures"), std::string::npos) << e;
  EXPECT_NE(e.find("'LlamaForCausalLM' is a decoder model, but this run needs an encoder model"), std::string::npos) << e;
  e = load_error(dir("RobertaForMaskedLM"), ModelRole::decoder);
  EXPECT_NE(e.find("'RobertaForMaskedLM' is an encoder model, but this run needs a decoder model"), std::string::npos) << e;
}

TEST_F(Registry, UnknownArchitecturesListTheSupportedOnes) {
  const std::string d = edited("LlamaForCausalLM", "falcon", [](json& c) {
    c["architectures"] = {"FalconForCausalLM"};
    c["model_type"] = "falcon";
  });
  const std::string e = load_error(d, ModelRole::decoder);
  EXPECT_NE(e.find("config.json: architectures"), std::string::npos) << e;
  EXPECT_NE(e.find("'FalconForCausalLM' is not supported"), std::string::npos) << e;
  for (const auto& a : architectures()) EXPECT_NE(e.find(a.name), std::string::npos) << e;
}

TEST_F(Registry, ModelTypeMustMatchTheArchitecture) {
  const std::string d = edited("LlamaForCausalLM", "type", [](json& c) { c["model_type"] = "granite"; });
  const std::string e = load_error(d, ModelRole::decoder);
  EXPECT_NE(e.find("config.json: model_type"), std::string::npos) << e;
  EXPECT_NE(e.find("'granite' does not match architectures 'LlamaForCausalLM' (expected model_type 'llama')"),
            std::string::npos)
      << e;
}

TEST_F(Registry, ArchitecturesMustNameExactlyOne) {
  for (const json& value : {json::array(), json::array({"LlamaForCausalLM", "GraniteForCausalLM"}), json("LlamaForCausalLM")}) {
    const std::string d = edited("LlamaForCausalLM", "arch-list", [&](json& c) { c["architectures"] = value; });
    const std::string e = load_error(d, ModelRole::decoder);
    EXPECT_NE(e.find("config.json: architectures"), std::string::npos) << e;
    EXPECT_NE(e.find("exactly one"), std::string::npos) << e;
  }
  const std::string d = edited("LlamaForCausalLM", "arch-missing", [](json& c) { c.erase("architectures"); });
  EXPECT_NE(load_error(d, ModelRole::decoder).find("architectures: missing"), std::string::npos);
}

// Config values a family has but evalrun does not implement are exit-2 errors naming config.json, the
// key and the value, never a silent difference.
TEST_F(Registry, FamilyOptionsThatAreNotImplementedAreRefused) {
  struct Case {
    const char* row;
    std::function<void(json&)> edit;
    const char* key;
    const char* value;
  };
  const std::vector<Case> cases = {
      {"Qwen2ForCausalLM", [](json& c) { c["use_sliding_window"] = true; c["sliding_window"] = 16; },
       "config.json: use_sliding_window", "true (sliding_window 16 < max_position_embeddings 512)"},
      {"Qwen2ForCausalLM", [](json& c) { c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; },
       "config.json: rope_scaling", "yarn"},
      {"Qwen2ForCausalLM", [](json& c) { c["head_dim"] = 32; }, "config.json: head_dim", "32"},
      {"Qwen2ForCausalLM", [](json& c) { c["hidden_act"] = "gelu"; }, "config.json: hidden_act", "'gelu'"},
      {"MistralForCausalLM", [](json& c) { c["hidden_act"] = "gelu"; }, "config.json: hidden_act", "'gelu'"},
      {"MistralForCausalLM", [](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; },
       "config.json: rope_scaling", "linear"},
      {"MistralForCausalLM", [](json& c) { c["attention_bias"] = true; }, "config.json: attention_bias", "true"},
      {"MistralForCausalLM", [](json& c) { c.erase("num_key_value_heads"); }, "config.json: num_key_value_heads",
       "missing"},
      {"MixtralForCausalLM", [](json& c) { c["num_experts_per_tok"] = 5; }, "config.json: num_experts_per_tok",
       "5 is more than num_local_experts 4"},
      {"MixtralForCausalLM", [](json& c) { c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; },
       "config.json: rope_scaling", "dynamic"},
      {"MixtralForCausalLM", [](json& c) { c["hidden_act"] = "gelu"; }, "config.json: hidden_act", "'gelu'"},
      {"GemmaForCausalLM", [](json& c) { c["attention_bias"] = true; }, "config.json: attention_bias", "true"},
      {"GemmaForCausalLM", [](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; },
       "config.json: rope_scaling", "linear"},
      {"GemmaForCausalLM", [](json& c) { c["hidden_activation"] = "relu"; }, "config.json: hidden_activation",
       "'relu' is not supported for gemma"},
      {"GemmaForCausalLM", [](json& c) { c.erase("num_key_value_heads"); }, "config.json: num_key_value_heads",
       "missing"},
      {"GemmaForCausalLM", [](json& c) { c["head_dim"] = 25; }, "config.json: head_dim", "must be even"},
      {"Starcoder2ForCausalLM", [](json& c) { c["hidden_act"] = "gelu"; }, "config.json: hidden_act", "'gelu'"},
      {"Starcoder2ForCausalLM", [](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; },
       "config.json: rope_scaling", "linear"},
      {"Starcoder2ForCausalLM", [](json& c) { c["head_dim"] = 32; }, "config.json: head_dim", "32"},
      {"Starcoder2ForCausalLM", [](json& c) { c["norm_epsilon"] = 0; }, "config.json: norm_epsilon", "must be > 0"},
      {"Starcoder2ForCausalLM", [](json& c) { c.erase("num_key_value_heads"); }, "config.json: num_key_value_heads",
       "missing"},
      {"GPTBigCodeForCausalLM", [](json& c) { c["multi_query"] = false; }, "config.json: multi_query", "false"},
      {"GPTBigCodeForCausalLM", [](json& c) { c["attention_softmax_in_fp32"] = false; },
       "config.json: attention_softmax_in_fp32", "false"},
      {"GPTBigCodeForCausalLM", [](json& c) { c["activation_function"] = "relu"; }, "config.json: activation_function",
       "'relu'"},
      {"GPT2LMHeadModel", [](json& c) { c["activation_function"] = "gelu"; }, "config.json: activation_function",
       "'gelu'"},
      {"GPT2LMHeadModel", [](json& c) { c["scale_attn_by_inverse_layer_idx"] = true; },
       "config.json: scale_attn_by_inverse_layer_idx", "true"},
      {"GPT2LMHeadModel", [](json& c) { c["reorder_and_upcast_attn"] = true; }, "config.json: reorder_and_upcast_attn",
       "true"},
      {"GPT2LMHeadModel", [](json& c) { c["n_head"] = 3; }, "config.json: n_head", "n_embd 64 is not a multiple of n_head 3"},
  };
  int i = 0;
  for (const auto& k : cases) {
    SCOPED_TRACE(std::string(k.row) + " " + k.key);
    const std::string d = edited(k.row, "refused-" + std::to_string(i++), k.edit);
    const std::string e = load_error(d, ModelRole::decoder);
    EXPECT_NE(e.find(k.key), std::string::npos) << e;
    EXPECT_NE(e.find(k.value), std::string::npos) << e;
  }
  // Gemma without head_dim takes GemmaConfig's 256 (not hidden_size / num_attention_heads = 16): the
  // tensors then have the wrong shape.
  const std::string no_head_dim = edited("GemmaForCausalLM", "gemma-no-head-dim", [](json& c) { c.erase("head_dim"); });
  const std::string e = load_error(no_head_dim, ModelRole::decoder);
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("1024"), std::string::npos) << e;  // 4 heads x 256
  // The encoder families' options evalrun does not implement.
  const std::vector<Case> encoder_cases = {
      {"BertForQuestionAnswering", [](json& c) { c["position_embedding_type"] = "relative_key"; },
       "config.json: position_embedding_type", "'relative_key'"},
      {"BertForMaskedLM", [](json& c) { c["hidden_act"] = "swish"; }, "config.json: hidden_act", "'swish'"},
      {"DistilBertForQuestionAnswering", [](json& c) { c["sinusoidal_pos_embds"] = true; },
       "config.json: sinusoidal_pos_embds", "true"},
      {"DistilBertForQuestionAnswering", [](json& c) { c["activation"] = "swish"; }, "config.json: activation",
       "'swish'"},
      {"DistilBertForQuestionAnswering", [](json& c) { c["architectures"] = {"DistilBertForMaskedLM"}; },
       "config.json: architectures", "'DistilBertForMaskedLM' is not supported"},
  };
  for (const auto& k : encoder_cases) {
    SCOPED_TRACE(std::string(k.row) + " " + k.key);
    const std::string d = edited(k.row, "refused-" + std::to_string(i++), k.edit);
    const std::string e = load_error(d, ModelRole::encoder);
    EXPECT_NE(e.find(k.key), std::string::npos) << e;
    EXPECT_NE(e.find(k.value), std::string::npos) << e;
  }
  // Qwen2 with use_sliding_window true but a window that covers every position loads (no effect).
  const std::string d = edited("Qwen2ForCausalLM", "window-covers", [](json& c) { c["use_sliding_window"] = true; });
  EXPECT_EQ(load_error(d, ModelRole::decoder), "(no error)");
}

}  // namespace
}  // namespace evalrun
