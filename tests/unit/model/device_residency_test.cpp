// Device residency (issue 21) as far as a machine without a GPU can check it. Off the host a model
// runs its torch path with every tensor on ModelLoad::device, so:
//  * the torch path (the one every device runs) gives the fast host path's numbers, for every
//    decoder family and encoder head, with padding and a KV cache;
//  * a load onto another device moves every weight there once, a tied head staying one tensor, and
//    picks the device's compute dtype (fp16 computes in float16 off the host, float32 on it);
//  * GPTQ is dequantized at load into float layers there; INT8 / FP8 (host kernels) and a device
//    string torch does not know are refused.
// "meta" stands in for the other device: libtorch 1.13 moves tensors there without a GPU (it has no
// meta kernels for index_select, so a forward cannot run there). scripts/gpu_check.sh runs the rest
// on a GPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/make_quantized.hpp"
#include "llama_test_util.hpp"
#include "model/llama.hpp"
#include "model/roberta.hpp"
#include "ops/gemm.hpp"
#include "quant/dense.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using testing::max_abs_diff;

class DeviceResidency : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = new fs::path(testing::make_temp_dir("evalrun-residency-test")); }
  static void TearDownTestSuite() {
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (root_ == nullptr) return;
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string llama(const std::string& preset) {
    const fs::path dir = *root_ / preset;
    if (!fs::exists(dir)) make_llama_checkpoint(dir.string(), preset, 5, 96);
    return dir.string();
  }
  static std::string encoder(const std::string& preset, EncoderHead head) {
    const fs::path dir = *root_ / (preset + (head == EncoderHead::question_answering ? "-qa" : "-mlm"));
    if (!fs::exists(dir)) make_roberta_checkpoint(dir.string(), preset, head, 5, 120);
    return dir.string();
  }
  // The same checkpoint on the torch path: oneDNN's sgemm off at load fixes the path for the model's life.
  template <class M>
  static std::unique_ptr<M> torch_path(const std::string& dir) {
    ops::set_onednn_sgemm_enabled(false);
    auto model = M::load({dir, DType::fp32, "cpu"});
    ops::set_onednn_sgemm_enabled(true);
    return model;
  }
  // tiny-llama's projections GPTQ-quantized in place (group 32, asymmetric, act-order).
  static quant::GptqSettings gptq_settings() {
    quant::GptqSettings settings;
    settings.group_size = 32;
    settings.sym = false;
    settings.desc_act = true;
    return settings;
  }
  static std::string gptq_llama() {
    const fs::path dir = *root_ / "gptq";
    if (!fs::exists(dir)) {
      fs::copy(llama("tiny-llama"), dir);
      make_gptq_checkpoint(dir.string(), gptq_settings(), 3);
    }
    return dir.string();
  }
  static fs::path* root_;
};
fs::path* DeviceResidency::root_ = nullptr;

TEST_F(DeviceResidency, DecoderTorchPathEqualsTheHostPathForEveryFamily) {
  if (!ops::have_onednn_sgemm()) GTEST_SKIP() << "no oneDNN sgemm: every run is on the torch path";
  // Two prompts of different lengths (left padding) and 4 cached decode steps.
  const std::vector<std::vector<std::int64_t>> prompts{{3, 17, 40, 9, 60, 11, 25}, {8, 90, 4}};
  for (const std::string preset : {"tiny-llama", "tiny-granite", "tiny-mistral", "tiny-qwen2", "tiny-mixtral",
                                   "tiny-gemma", "tiny-starcoder2", "tiny-gpt-bigcode", "tiny-gpt2"}) {
    const std::string dir = llama(preset);
    auto host = LlamaModel::load({dir, DType::fp32, "cpu"});
    auto torch = torch_path<LlamaModel>(dir);
    const auto want = testing::generate(*host, prompts, 4);
    const auto got = testing::generate(*torch, prompts, 4, &want.tokens);
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(got.tokens[b], want.tokens[b]) << preset << " row " << b;
      for (std::size_t s = 0; s < want.step_logits[b].size(); ++s) {
        EXPECT_LT(max_abs_diff(got.step_logits[b][s], want.step_logits[b][s]), 1e-4f)
            << preset << " row " << b << " step " << s;
      }
    }
    const std::vector<std::int64_t> ids{5, 9, 2, 77, 31};
    const auto hs = torch->hidden_states(ids.data(), 1, 5), hw = host->hidden_states(ids.data(), 1, 5);
    ASSERT_EQ(hs.size(), hw.size()) << preset;
    for (std::size_t l = 0; l < hs.size(); ++l) EXPECT_LT(max_abs_diff(hs[l], hw[l]), 1e-4f) << preset << " " << l;
  }
}

TEST_F(DeviceResidency, EncoderTorchPathEqualsTheHostPathForEveryHead) {
  if (!ops::have_onednn_sgemm()) GTEST_SKIP() << "no oneDNN sgemm: every run is on the torch path";
  // Two rows, the second padded; BERT with question / context token types.
  const std::int64_t B = 2, L = 9;
  const std::vector<std::int64_t> ids{0, 11, 40, 7, 2, 2, 50, 61, 2, 0, 33, 9, 2, 2, 17, 2, 1, 1};
  const std::vector<std::int64_t> mask{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  const std::vector<std::int64_t> types{0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0};  // where the model has them
  for (const std::string preset : {"tiny", "tiny-bert", "tiny-distilbert"}) {
    for (const EncoderHead head : {EncoderHead::question_answering, EncoderHead::masked_lm}) {
      if (preset == "tiny-distilbert" && head == EncoderHead::masked_lm) continue;  // qa only (make_model)
      const std::string dir = encoder(preset, head);
      auto host = RobertaModel::load({dir, DType::fp32, "cpu"});
      auto torch = torch_path<RobertaModel>(dir);
      const std::int64_t* type_ids = host->uses_token_types() ? types.data() : nullptr;
      if (head == EncoderHead::question_answering) {
        std::vector<float> s1, e1, s2, e2;
        host->question_answering(ids.data(), mask.data(), type_ids, B, L, s1, e1);
        torch->question_answering(ids.data(), mask.data(), type_ids, B, L, s2, e2);
        EXPECT_LT(max_abs_diff(s1, s2), 1e-4f) << preset;
        EXPECT_LT(max_abs_diff(e1, e2), 1e-4f) << preset;
      } else {
        const std::vector<std::pair<std::int64_t, std::int64_t>> at{{0, 3}, {1, 5}, {1, 1}};
        std::vector<float> l1, l2;
        host->masked_lm(ids.data(), mask.data(), type_ids, B, L, at, l1);
        torch->masked_lm(ids.data(), mask.data(), type_ids, B, L, at, l2);
        ASSERT_EQ(l1.size(), 3u * 120u) << preset;
        EXPECT_LT(max_abs_diff(l1, l2), 1e-4f) << preset;
      }
      const auto h1 = host->hidden_states(ids.data(), mask.data(), type_ids, B, L);
      const auto h2 = torch->hidden_states(ids.data(), mask.data(), type_ids, B, L);
      ASSERT_EQ(h1.size(), h2.size());
      for (std::size_t l = 0; l < h1.size(); ++l) EXPECT_LT(max_abs_diff(h1[l], h2[l]), 1e-4f) << preset << " " << l;
    }
  }
}

TEST_F(DeviceResidency, LoadMovesEveryWeightToTheDeviceOnce) {
  // Untied (tiny-llama) and tied (tiny-qwen2: lm_head is the embeddings) decoders, an encoder whose
  // MLM decoder is tied to the word embeddings: the same bytes on the device as on the host, so no
  // tensor was left behind twice and a tie stayed one tensor. (The host's bfloat16 raw-buffer path
  // holds its norm weights in float32; the torch path's host load holds what the device does.)
  for (const std::string preset : {"tiny-llama", "tiny-qwen2", "tiny-mixtral", "tiny-gpt2"}) {
    for (const DType dtype : {DType::fp32, DType::bf16}) {
      LlamaModel::set_raw_bfloat16_path(false);
      auto host = LlamaModel::load({llama(preset), dtype, "cpu"});
      LlamaModel::set_raw_bfloat16_path(true);
      auto off = LlamaModel::load({llama(preset), dtype, "meta"});
      EXPECT_EQ(off->device(), "meta") << preset;
      EXPECT_EQ(host->device(), "cpu") << preset;
      EXPECT_EQ(off->weight_bytes(), host->weight_bytes()) << preset;
      EXPECT_STREQ(off->compute_dtype(), host->compute_dtype()) << preset;
    }
  }
  auto mlm_host = RobertaModel::load({encoder("tiny", EncoderHead::masked_lm), DType::fp32, "cpu"});
  auto mlm_off = RobertaModel::load({encoder("tiny", EncoderHead::masked_lm), DType::fp32, "meta"});
  EXPECT_EQ(mlm_off->device(), "meta");
  EXPECT_EQ(mlm_off->weight_bytes(), mlm_host->weight_bytes());

  // fp16: float16-rounded weights computed in float32 on the host (no float16 GEMM on this CPU),
  // float16 compute off it, with half the bytes.
  auto h16 = LlamaModel::load({llama("tiny-llama"), DType::fp16, "cpu"});
  auto d16 = LlamaModel::load({llama("tiny-llama"), DType::fp16, "meta"});
  EXPECT_STREQ(h16->compute_dtype(), "float32");
  EXPECT_STREQ(d16->compute_dtype(), "float16");
  EXPECT_EQ(d16->weight_bytes() * 2, h16->weight_bytes());
  auto e16 = RobertaModel::load({encoder("tiny", EncoderHead::question_answering), DType::fp16, "meta"});
  EXPECT_STREQ(e16->compute_dtype(), "float16");
}

// On a machine with a GPU (a CUDA build: scripts/gpu_check.sh runs this), the same models on cuda:0.
TEST_F(DeviceResidency, OnCudaTheModelsGiveTheHostsNumbers) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::vector<std::int64_t>> prompts{{3, 17, 40, 9, 60, 11, 25}, {8, 90, 4}};
  for (const std::string preset : {"tiny-llama", "tiny-mixtral", "tiny-gpt2", "tiny-gemma", "gptq"}) {
    const std::string dir = preset == "gptq" ? gptq_llama() : llama(preset);
    auto host = LlamaModel::load({dir, DType::fp32, "cpu"});
    auto gpu = LlamaModel::load({dir, DType::fp32, "cuda:0"});
    EXPECT_EQ(gpu->device(), "cuda:0") << preset;
    const auto want = testing::generate(*host, prompts, 4);
    const auto got = testing::generate(*gpu, prompts, 4, &want.tokens);
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(got.tokens[b], want.tokens[b]) << preset << " row " << b;
      for (std::size_t s = 0; s < want.step_logits[b].size(); ++s) {
        EXPECT_LT(max_abs_diff(got.step_logits[b][s], want.step_logits[b][s]), 1e-4f) << preset << " step " << s;
      }
    }
  }
  const std::vector<std::int64_t> ids{0, 11, 40, 7, 2, 2, 50, 61, 2}, mask(9, 1);
  auto host = RobertaModel::load({encoder("tiny", EncoderHead::question_answering), DType::fp32, "cpu"});
  auto gpu = RobertaModel::load({encoder("tiny", EncoderHead::question_answering), DType::fp32, "cuda:0"});
  std::vector<float> s1, e1, s2, e2;
  host->question_answering(ids.data(), mask.data(), 1, 9, s1, e1);
  gpu->question_answering(ids.data(), mask.data(), 1, 9, s2, e2);
  EXPECT_LT(max_abs_diff(s1, s2), 1e-4f);
  EXPECT_LT(max_abs_diff(e1, e2), 1e-4f);
}

TEST_F(DeviceResidency, GptqIsDequantizedAtLoadIntegerAndFp8AreRefused) {
  // GPTQ off the host: float layers of the compute dtype, dequantized once, holding what the float
  // checkpoint's layers hold (make_gptq_checkpoint quantizes tiny-llama's projections in place).
  const quant::GptqSettings settings = gptq_settings();
  const fs::path gptq = gptq_llama();
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    auto q = LlamaModel::load({gptq.string(), dtype, "meta"});
    auto f = LlamaModel::load({llama("tiny-llama"), dtype, "meta"});
    EXPECT_EQ(q->device(), "meta");
    EXPECT_EQ(q->weight_bytes(), f->weight_bytes());
    EXPECT_NE(q->quantization().find(settings.describe() + " (dequantized to " + f->compute_dtype() + " on meta at load)"),
              std::string::npos)
        << q->quantization();
  }
  // On the host it stays packed and bf16 stays refused (quantized kernels take float32 rows).
  auto host = LlamaModel::load({gptq.string(), DType::fp32, "cpu"});
  EXPECT_EQ(host->quantization(), settings.describe());
  EXPECT_LT(host->weight_bytes(), LlamaModel::load({llama("tiny-llama"), DType::fp32, "cpu"})->weight_bytes());
  EXPECT_THROW(LlamaModel::load({gptq.string(), DType::bf16, "cpu"}), InputError);
  // The layers finish_load puts on the device, made on the host: the packed kernels' numbers.
  const std::vector<std::vector<std::int64_t>> prompts{{3, 17, 40, 9, 60, 11, 25}, {8, 90, 4}};
  const auto want = testing::generate(*host, prompts, 4);
  const auto sites = host->linear_sites();
  for (std::size_t i = 0; i < sites.size(); ++i) {
    host->replace_linear(i, quant::dequantized(*sites[i].layer, torch::kFloat32, torch::kCPU, /*transposed=*/false));
  }
  EXPECT_EQ(host->quantization(), settings.describe());
  const auto got = testing::generate(*host, prompts, 4, &want.tokens);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(got.tokens[b], want.tokens[b]) << "row " << b;
    for (std::size_t s = 0; s < want.step_logits[b].size(); ++s) {
      EXPECT_LT(max_abs_diff(got.step_logits[b][s], want.step_logits[b][s]), 1e-4f) << "row " << b << " step " << s;
    }
  }

  const fs::path fp8 = *root_ / "fp8";
  fs::copy(llama("tiny-llama"), fp8);
  make_fp8_checkpoint(fp8.string(), quant::Fp8Settings{}, false, 3);
  try {
    LlamaModel::load({fp8.string(), DType::fp16, "meta"});
    ADD_FAILURE() << "an FP8 checkpoint loaded off the host";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "quantization.method");
    EXPECT_NE(std::string(e.what()).find("only float and GPTQ checkpoints run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LlamaModel::load({llama("tiny-llama"), DType::fp32, "gpu:0"}), std::invalid_argument);
}

}  // namespace
}  // namespace evalrun
