// GPTQ checkpoints through LlamaModel::load:
//  * oracle/llama-gptq (with $EVALRUN_DATA_DIR) loaded directly as GPTQ (4-bit in memory): its
//    layers dequantize exactly to the reference's /dequant weights, and prompt logits, hidden states,
//    step logits and the 24 greedy tokens of the 6 prompts match transformers' run of the exactly
//    dequantized model within 1e-4, alone and as one left-padded batch;
//  * a tiny-llama checkpoint quantized by make_gptq_checkpoint: the same as the float model built
//    from its dequantized weights, and independent of batch size and padding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/hdf5_file.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/make_quantized.hpp"
#include "quant/dense.hpp"
#include "test_util.hpp"
#include "unit/model/llama_test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using testing::max_abs_diff;

struct Sample {
  std::string id;
  std::vector<std::int64_t> input_ids, generated_ids;
  std::vector<float> prompt_logits, prompt_hidden, step_logits;
};

std::vector<Sample> read_samples(const std::string& oracle) {
  H5Reader ref(oracle + "/reference.h5");
  std::vector<Sample> out;
  for (const auto& id : ref.read_strings("/ids")) {
    const std::string g = "/samples/" + id + "/";
    out.push_back({id, ref.read_i64(g + "input_ids"), ref.read_i64(g + "generated_ids"), ref.read_f32(g + "prompt_logits"),
                   ref.read_f32(g + "prompt_hidden_states"), ref.read_f32(g + "step_logits")});
  }
  return out;
}

TEST(GptqOracle, LayersDequantizeToTheReferenceWeightsExactly) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string oracle = data + "/oracle/llama-gptq";
  auto model = LlamaModel::load({oracle, DType::fp32, "cpu", "gptq"});
  EXPECT_EQ(model->quantization(), "gptq w4 g32 asym act_order");
  H5Reader ref(oracle + "/reference.h5");
  std::size_t layers = 0, resident = 0, fp16 = 0;
  for (const auto& site : model->linear_sites()) {
    const std::vector<float> w = site.layer->weight_f32();
    const std::int64_t in = site.layer->in_features();
    std::int64_t row = 0;
    for (std::size_t p = 0; p < site.prefixes.size(); ++p) {
      const std::vector<float> want = ref.read_f32("/dequant/" + site.prefixes[p] + ".weight");
      ASSERT_EQ(want.size(), static_cast<std::size_t>(site.part_out[p] * in)) << site.prefixes[p];
      EXPECT_TRUE(std::equal(want.begin(), want.end(), w.begin() + row * in)) << site.prefixes[p];
      row += site.part_out[p];
      ++layers;
    }
    EXPECT_TRUE(site.layer->bias_f32().empty());
    resident += site.layer->resident_bytes();
    fp16 += 2 * site.layer->in_features() * site.layer->out_features();
  }
  EXPECT_EQ(layers, 14u);
  // The 4-bit weights, float16 scales and 4-bit zeros are 0.289x float16; these layers are tiny
  // (32 to 128 outputs), so the act-order permutation (2 bytes per input) adds 1/out on top.
  const double ratio = static_cast<double>(resident) / fp16;
  std::printf("llama-gptq projections: %zu bytes resident, %.3f x their float16 size\n", resident, ratio);
  EXPECT_GE(ratio, 0.25);
  EXPECT_LE(ratio, 0.32);
}

TEST(GptqOracle, DirectGptqLoadMatchesHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string oracle = data + "/oracle/llama-gptq";
  auto model = LlamaModel::load({oracle, DType::fp32, "cpu"});  // auto: whatever it holds
  EXPECT_EQ(model->quantization(), "gptq w4 g32 asym act_order");
  const std::int64_t V = 512, H = 64;
  const auto samples = read_samples(oracle);
  ASSERT_EQ(samples.size(), 6u);
  float worst_prompt = 0, worst_hidden = 0, worst_step = 0;
  for (const auto& s : samples) {
    const std::int64_t L = s.input_ids.size();
    auto cache = model->new_cache(1, L);
    std::vector<std::int64_t> pos(L), mask(L, 1);
    for (std::int64_t t = 0; t < L; ++t) pos[t] = t;
    std::vector<float> logits;
    model->forward(s.input_ids.data(), pos.data(), mask.data(), 1, L, *cache, true, logits);
    const float dp = max_abs_diff(logits, s.prompt_logits);
    EXPECT_LT(dp, 1e-4f) << s.id;
    worst_prompt = std::max(worst_prompt, dp);
    auto hidden = model->hidden_states(s.input_ids.data(), 1, L);
    ASSERT_EQ(hidden.size(), 3u);
    for (std::size_t i = 0; i < hidden.size(); ++i) {
      const float dh = max_abs_diff(hidden[i].data(), s.prompt_hidden.data() + i * L * H, L * H);
      EXPECT_LT(dh, 1e-4f) << s.id << " hidden state " << i;
      worst_hidden = std::max(worst_hidden, dh);
    }
    auto gen = testing::generate(*model, {s.input_ids}, 24);
    EXPECT_EQ(gen.tokens[0], s.generated_ids) << s.id;
    for (int step = 0; step < 24; ++step) {
      const float ds = max_abs_diff(gen.step_logits[0][step].data(), s.step_logits.data() + step * V, V);
      EXPECT_LT(ds, 1e-4f) << s.id << " step " << step;
      worst_step = std::max(worst_step, ds);
    }
  }
  // All six as one left-padded batch (prefill of 6 x 24 rows: the dequantize + sgemm path).
  std::vector<std::vector<std::int64_t>> prompts;
  for (const auto& s : samples) prompts.push_back(s.input_ids);
  auto batched = testing::generate(*model, prompts, 24);
  float worst_batch = 0;
  for (std::size_t b = 0; b < samples.size(); ++b) {
    EXPECT_EQ(batched.tokens[b], samples[b].generated_ids) << samples[b].id;
    for (int step = 0; step < 24; ++step) {
      const float d = max_abs_diff(batched.step_logits[b][step].data(), samples[b].step_logits.data() + step * V, V);
      EXPECT_LT(d, 1e-4f) << samples[b].id << " step " << step;
      worst_batch = std::max(worst_batch, d);
    }
  }
  std::printf("llama-gptq (4-bit in memory) max |diff|: prompt logits %.3g, hidden states %.3g, step logits %.3g, "
              "batched step logits %.3g\n",
              worst_prompt, worst_hidden, worst_step, worst_batch);
}

TEST(GptqOracle, FloatRunOfAGptqCheckpointIsRefusedForBf16AndOtherMethods) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string oracle = data + "/oracle/llama-gptq";
  EXPECT_THROW(LlamaModel::load({oracle, DType::fp32, "cpu", "none"}), InputError);
  EXPECT_THROW(LlamaModel::load({oracle, DType::fp32, "cpu", "int8"}), InputError);
  EXPECT_THROW(LlamaModel::load({oracle, DType::bf16, "cpu"}), InputError);
}

// ---- a generated GPTQ checkpoint ------------------------------------------------------------------

class GptqTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::make_temp_dir("evalrun-gptq-tiny");
    make_llama_checkpoint((dir_ / "float").string(), "tiny-llama", 3);
    fs::copy(dir_ / "float", dir_ / "gptq");
    quant::GptqSettings s;
    s.group_size = 32;
    s.sym = false;
    s.desc_act = true;
    make_gptq_checkpoint((dir_ / "gptq").string(), s, 3);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // The same model with every projection replaced by the float32 dequantization of its layer.
  static std::unique_ptr<LlamaModel> dequantized_float_model() {
    auto model = LlamaModel::load({(dir_ / "gptq").string(), DType::fp32, "cpu"});
    const auto sites = model->linear_sites();
    for (std::size_t i = 0; i < sites.size(); ++i) {
      const auto* layer = sites[i].layer;
      std::vector<float> w = layer->weight_f32();
      torch::Tensor wt = torch::from_blob(w.data(), {layer->out_features(), layer->in_features()}).clone();
      model->replace_linear(i, std::make_unique<quant::DenseLinear>(wt, torch::Tensor(), true));
    }
    return model;
  }

  static inline fs::path dir_;
};

const std::vector<std::vector<std::int64_t>> kPrompts = {
    {1, 17, 99, 4, 200, 31, 8}, {1, 250}, {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 77}, {1, 42, 42, 42}};

TEST_F(GptqTiny, CheckpointIsGptqAndDifferentFromTheFloatOne) {
  auto q = LlamaModel::load({(dir_ / "gptq").string(), DType::fp32, "cpu"});
  EXPECT_EQ(q->quantization(), "gptq w4 g32 asym act_order");
  EXPECT_TRUE(fs::exists(dir_ / "gptq" / "quantize_config.json"));
  auto f = LlamaModel::load({(dir_ / "float").string(), DType::fp32, "cpu"});
  // Rounding to 4 bits moves the weights (by at most half a step) but keeps them close.
  const auto qs = q->linear_sites(), fs_ = f->linear_sites();
  ASSERT_EQ(qs.size(), fs_.size());
  for (std::size_t i = 0; i < qs.size(); ++i) {
    const auto wq = qs[i].layer->weight_f32(), wf = fs_[i].layer->weight_f32();
    const float d = max_abs_diff(wq, wf);
    EXPECT_GT(d, 0.0f);
    EXPECT_LT(d, 0.05f);  // weights are N(0, 0.1): a group's range is below 0.8, half a step below 0.03
  }
}

TEST_F(GptqTiny, MatchesTheFloatModelOfItsDequantizedWeights) {
  auto q = LlamaModel::load({(dir_ / "gptq").string(), DType::fp32, "cpu"});
  auto f = dequantized_float_model();
  auto ref = testing::generate(*f, kPrompts, 12);
  auto got = testing::generate(*q, kPrompts, 12, &ref.tokens);  // teacher-forced on the float tokens
  float worst = 0;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    for (int s = 0; s < 12; ++s) worst = std::max(worst, max_abs_diff(got.step_logits[b][s], ref.step_logits[b][s]));
  }
  EXPECT_LT(worst, 1e-4f);
  std::printf("tiny-llama gptq vs dequantized float model: max |step logit diff| %.3g\n", worst);
}

TEST_F(GptqTiny, IndependentOfBatchAndPadding) {
  auto q = LlamaModel::load({(dir_ / "gptq").string(), DType::fp32, "cpu"});
  auto batched = testing::generate(*q, kPrompts, 12);
  float worst = 0;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    auto single = testing::generate(*q, {kPrompts[b]}, 12, nullptr);
    EXPECT_EQ(single.tokens[0], batched.tokens[b]) << b;
    for (int s = 0; s < 12; ++s) worst = std::max(worst, max_abs_diff(single.step_logits[0][s], batched.step_logits[b][s]));
  }
  EXPECT_LT(worst, 1e-5f);
  // Two copies of each prompt (8 rows per decode step: the packed product; 2 x 4 x 14 prefill rows:
  // dequantized tiles + sgemm) give the same as one.
  std::vector<std::vector<std::int64_t>> twice = kPrompts;
  twice.insert(twice.end(), kPrompts.begin(), kPrompts.end());
  auto doubled = testing::generate(*q, twice, 12);
  for (std::size_t b = 0; b < twice.size(); ++b) {
    EXPECT_EQ(doubled.tokens[b], batched.tokens[b % kPrompts.size()]);
    for (int s = 0; s < 12; ++s) {
      EXPECT_LT(max_abs_diff(doubled.step_logits[b][s], batched.step_logits[b % kPrompts.size()][s]), 1e-5f);
    }
  }
}

}  // namespace
}  // namespace evalrun
