// FP8 checkpoints written by make_fp8_checkpoint (tiny Llama: per-channel scales, dynamic
// activations; tiny RoBERTa QA: per-tensor scales, static activations calibrated at make time) run
// through the models: the same outputs as the float model whose projections are the dequantized
// weights applied to activations rounded to e4m3 by this test's own rounding; independent of batch
// size and padding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/make_quantized.hpp"
#include "model/roberta.hpp"
#include "quant/dense.hpp"
#include "test_util.hpp"
#include "unit/model/llama_test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using testing::max_abs_diff;

// The 127 non-negative finite e4m3 values, from the format's definition.
const std::array<double, 127>& e4m3_values() {
  static const std::array<double, 127> v = [] {
    std::array<double, 127> t{};
    for (int c = 0; c < 127; ++c) {
      const int e = c >> 3, m = c & 7;
      t[c] = e == 0 ? m * std::pow(2.0, -9) : (1 + m / 8.0) * std::pow(2.0, e - 7);
    }
    return t;
  }();
  return v;
}

// Nearest e4m3 value (ties to the even code), saturating at 448.
float round_e4m3(float x) {
  const auto& v = e4m3_values();
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return std::copysign(448.0f, x);
  const auto it = std::lower_bound(v.begin(), v.end(), a);  // first value >= a
  const int hi = static_cast<int>(it - v.begin()), lo = hi - 1;
  int c = hi;
  if (lo >= 0) {
    const double dl = a - v[lo], dh = v[hi] - a;
    c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  }
  return std::copysign(static_cast<float>(v[c]), x);
}

// A float layer that rounds its input to e4m3 first: at input_scale (> 0), or per row at max|x| / 448.
class EmulatedFp8 final : public quant::Linear {
 public:
  EmulatedFp8(std::vector<float> w, std::vector<float> b, std::int64_t out, std::int64_t in, float input_scale)
      : Linear(in, out), input_scale_(input_scale) {
    torch::Tensor wt = torch::from_blob(w.data(), {out, in}).clone();
    torch::Tensor bt = b.empty() ? torch::Tensor() : torch::from_blob(b.data(), {out}).clone();
    dense_ = std::make_unique<quant::DenseLinear>(wt, bt, true);
  }
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    const std::int64_t in = in_features();
    std::vector<float> q(M * in);
    for (std::int64_t m = 0; m < M; ++m) {
      float s = input_scale_;
      if (s == 0.0f) {
        float amax = 0;
        for (std::int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(x[m * ldx + k]));
        s = amax / 448.0f;
      }
      for (std::int64_t k = 0; k < in; ++k) q[m * in + k] = s > 0 ? round_e4m3(x[m * ldx + k] / s) * s : x[m * ldx + k];
    }
    dense_->forward(q.data(), M, in, y, ldy, alpha, beta);
  }
  std::vector<float> weight_f32() const override { return dense_->weight_f32(); }
  std::vector<float> bias_f32() const override { return dense_->bias_f32(); }
  std::size_t resident_bytes() const override { return dense_->resident_bytes(); }
  std::string describe() const override { return "emulated fp8"; }
  void export_tensors(const std::string&, std::vector<TensorToWrite>&) const override {}

 private:
  float input_scale_;
  quant::LinearPtr dense_;
};

// Replaces every site of `model` by emulated layers built from its own dequantized weights and the
// checkpoint's input_scale tensors (static) or per-row scaling (dynamic).
template <typename Model>
void emulate(Model& model, const std::string& dir, bool static_act) {
  Checkpoint ckpt(dir);
  const auto sites = model.linear_sites();
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& site = sites[i];
    const std::vector<float> w = site.layer->weight_f32(), b = site.layer->bias_f32();
    const std::int64_t in = site.layer->in_features();
    std::vector<quant::LinearPtr> parts;
    std::int64_t row = 0;
    for (std::size_t p = 0; p < site.prefixes.size(); ++p) {
      const std::int64_t out = site.part_out[p];
      float input_scale = 0.0f;
      if (static_act) {
        const TensorView& v = ckpt.get(site.prefixes[p] + ".input_scale");
        std::memcpy(&input_scale, v.data, 4);
        EXPECT_GT(input_scale, 0.0f);
      }
      std::vector<float> pw(w.begin() + row * in, w.begin() + (row + out) * in);
      std::vector<float> pb = b.empty() ? std::vector<float>() : std::vector<float>(b.begin() + row, b.begin() + row + out);
      parts.push_back(std::make_unique<EmulatedFp8>(pw, pb, out, in, input_scale));
      row += out;
    }
    model.replace_linear(i, quant::concat_outputs(std::move(parts)));
  }
}

class Fp8Models : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::make_temp_dir("evalrun-fp8-models");
    make_llama_checkpoint((dir_ / "llama-float").string(), "tiny-llama", 4);
    fs::copy(dir_ / "llama-float", dir_ / "llama");
    make_fp8_checkpoint((dir_ / "llama").string(), quant::Fp8Settings{false}, true, 4);
    make_roberta_checkpoint((dir_ / "roberta-float").string(), "tiny", EncoderHead::question_answering, 4);
    fs::copy(dir_ / "roberta-float", dir_ / "roberta");
    make_fp8_checkpoint((dir_ / "roberta").string(), quant::Fp8Settings{true}, false, 4);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static inline fs::path dir_;
};

const std::vector<std::vector<std::int64_t>> kPrompts = {
    {1, 17, 99, 4, 200, 31, 8}, {1, 250}, {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 77}};

TEST_F(Fp8Models, LlamaMatchesEmulationAndIsBatchIndependent) {
  auto q = LlamaModel::load({(dir_ / "llama").string(), DType::fp32, "cpu", "fp8"});
  EXPECT_EQ(q->quantization(), "fp8 e4m3 dynamic");
  // the weights stay one byte each
  std::size_t resident = 0, weights = 0;
  for (const auto& s : q->linear_sites()) {
    resident += s.layer->resident_bytes();
    weights += s.layer->in_features() * s.layer->out_features();
  }
  EXPECT_LT(resident, weights + weights / 8);

  auto e = LlamaModel::load({(dir_ / "llama").string(), DType::fp32, "cpu"});
  emulate(*e, (dir_ / "llama").string(), false);
  auto ref = testing::generate(*e, kPrompts, 10);
  auto got = testing::generate(*q, kPrompts, 10, &ref.tokens);
  float worst = 0;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    for (int s = 0; s < 10; ++s) worst = std::max(worst, max_abs_diff(got.step_logits[b][s], ref.step_logits[b][s]));
  }
  EXPECT_LT(worst, 1e-4f);
  // batch and padding: each prompt alone, fed the same tokens
  float worst_batch = 0;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    const std::vector<std::vector<std::int64_t>> forced = {ref.tokens[b]};
    auto single = testing::generate(*q, {kPrompts[b]}, 10, &forced);
    for (int s = 0; s < 10; ++s) worst_batch = std::max(worst_batch, max_abs_diff(single.step_logits[0][s], got.step_logits[b][s]));
  }
  EXPECT_LT(worst_batch, 1e-5f);
  // and close to, but not the same as, the float model it came from
  auto f = LlamaModel::load({(dir_ / "llama-float").string(), DType::fp32, "cpu"});
  auto fl = testing::generate(*f, kPrompts, 10, &ref.tokens);
  float worst_float = 0;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    for (int s = 0; s < 10; ++s) worst_float = std::max(worst_float, max_abs_diff(got.step_logits[b][s], fl.step_logits[b][s]));
  }
  EXPECT_GT(worst_float, 1e-3f);
  std::printf("tiny-llama fp8: max |step logit diff| vs emulation %.3g, batch vs single %.3g, vs float model %.3g\n",
              worst, worst_batch, worst_float);
}

TEST_F(Fp8Models, RobertaStaticActivationsMatchEmulation) {
  auto q = RobertaModel::load({(dir_ / "roberta").string(), DType::fp32, "cpu"});
  EXPECT_EQ(q->quantization(), "fp8 e4m3 static");
  auto e = RobertaModel::load({(dir_ / "roberta").string(), DType::fp32, "cpu"});
  emulate(*e, (dir_ / "roberta").string(), true);
  const std::int64_t B = 3, L = 20;
  std::vector<std::int64_t> ids(B * L), mask(B * L, 1);
  for (std::int64_t i = 0; i < B * L; ++i) ids[i] = 4 + (i * 37) % 900;
  for (std::int64_t t = 12; t < L; ++t) {  // row 1 right-padded after 12 tokens
    ids[L + t] = 1;
    mask[L + t] = 0;
  }
  std::vector<float> qs, qe, es, ee;
  q->question_answering(ids.data(), mask.data(), B, L, qs, qe);
  e->question_answering(ids.data(), mask.data(), B, L, es, ee);
  EXPECT_LT(max_abs_diff(qs, es), 1e-4f);
  EXPECT_LT(max_abs_diff(qe, ee), 1e-4f);
  // The padded row alone, unpadded: the same logits at its tokens (static scales: no batch coupling).
  std::vector<float> s1, e1;
  q->question_answering(ids.data() + L, mask.data() + L, 1, 12, s1, e1);
  EXPECT_LT(max_abs_diff(s1.data(), qs.data() + L, 12), 1e-5f);
  EXPECT_LT(max_abs_diff(e1.data(), qe.data() + L, 12), 1e-5f);
}

}  // namespace
}  // namespace evalrun
