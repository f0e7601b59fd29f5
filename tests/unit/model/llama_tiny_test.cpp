// Llama / Granite on checkpoints the project makes itself (no shared data needed): make_model round
// trip, agreement with a naive float64 re-implementation of transformers' forward (Llama, Granite with
// each multiplier, llama3, linear and dynamic RoPE scaling), cached decoding versus full
// recomputation, left padding, the torch fallback path, bf16 / fp16, Mixtral's expert load, and the
// loader's and config's error messages.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "ops/activations.hpp"
#include "ops/gemm.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "llama_test_util.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::max_abs_diff;
constexpr std::int64_t kVocab = 96;

class TinyLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(testing::make_temp_dir("evalrun-llama-test"));
    make_llama_checkpoint((*root_ / "llama").string(), "tiny-llama", 11, kVocab);
    make_llama_checkpoint((*root_ / "granite").string(), "tiny-granite", 11, kVocab);
  }
  static void TearDownTestSuite() {
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (root_ == nullptr) return;
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string llama_dir() { return (*root_ / "llama").string(); }
  static std::string granite_dir() { return (*root_ / "granite").string(); }

  // A copy of `src` whose tensors and config.json went through the edit functions.
  static std::string edited_copy(const std::string& src, const std::string& name,
                                 const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors,
                                 const std::function<void(json&)>& edit_config = nullptr) {
    const fs::path dst = *root_ / name;
    fs::create_directories(dst);
    SafetensorsFile file((fs::path(src) / "model.safetensors").string());
    std::vector<TensorToWrite> tensors;
    for (const auto& [n, v] : file.tensors()) {
      tensors.push_back(TensorToWrite{n, v.dtype, v.shape, std::vector<std::byte>(v.data, v.data + v.nbytes)});
    }
    if (edit_tensors) edit_tensors(tensors);
    write_safetensors((dst / "model.safetensors").string(), tensors);
    json cfg = json::parse(std::ifstream(fs::path(src) / "config.json"));
    if (edit_config) edit_config(cfg);
    std::ofstream(dst / "config.json") << cfg.dump(2);
    return dst.string();
  }
  static std::string config_copy(const std::string& src, const std::string& name, const std::function<void(json&)>& f) {
    return edited_copy(src, name, nullptr, f);
  }

  static fs::path* root_;
};
fs::path* TinyLlama::root_ = nullptr;

std::vector<std::int64_t> sequence(std::int64_t len, std::int64_t salt) {
  std::vector<std::int64_t> ids(len);
  ids[0] = 1;
  for (std::int64_t t = 1; t < len; ++t) ids[t] = 3 + (t * 37 + salt * 11) % (kVocab - 3);
  return ids;
}

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return "";
}

// transformers' LlamaForCausalLM / GraniteForCausalLM forward over one unpadded sequence, written
// out naively in float64 from config.json and the checkpoint: logits [L, V] as float32 values.
// `prefill` (dynamic rope scaling only) says how the sequence went through the model: its first
// `prefill` tokens in one call, then one token per call through the cache (0: all in one call).
std::vector<float> naive_logits(const std::string& dir, const std::vector<std::int64_t>& ids_v,
                                std::int64_t prefill = 0) {
  torch::InferenceMode guard;
  const json cfg = json::parse(std::ifstream(fs::path(dir) / "config.json"));
  SafetensorsFile f((fs::path(dir) / "model.safetensors").string());
  auto W = [&](const std::string& n) {
    const TensorView& v = *f.find(n);
    return torch::from_blob(const_cast<std::byte*>(v.data), v.shape, torch::kFloat32).to(torch::kFloat64);
  };
  const bool granite = cfg["model_type"] == "granite";
  const std::int64_t L = ids_v.size(), H = cfg["hidden_size"], nh = cfg["num_attention_heads"];
  const std::int64_t nkv = cfg["num_key_value_heads"], layers = cfg["num_hidden_layers"], d = H / nh;
  const double eps = cfg["rms_norm_eps"], theta = cfg["rope_theta"];
  const double emb_mult = granite ? cfg.value("embedding_multiplier", 1.0) : 1.0;
  const double attn_mult = granite ? cfg.value("attention_multiplier", 1.0) : 1.0 / std::sqrt(double(d));
  const double res_mult = granite ? cfg.value("residual_multiplier", 1.0) : 1.0;
  const double logit_scale = granite ? cfg.value("logits_scaling", 1.0) : 1.0;

  // inv_freq_i = theta^(-2i/d); llama3: keep short wavelengths, divide long ones by factor, and
  // interpolate linearly in (old_len / wavelength) in between.
  std::vector<double> inv_freq(d / 2);
  for (std::int64_t i = 0; i < d / 2; ++i) inv_freq[i] = 1.0 / std::pow(theta, 2.0 * i / d);
  const json rs = cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object() ? cfg["rope_scaling"] : json();
  const std::string rope_type = rs.is_object() ? rs.value("rope_type", rs.value("type", "")) : "";
  // angle(t, i): linear divides the position by factor; dynamic rotates position t with the base of
  // the call it went through, of length n = prefill (or L) for the prompt and t + 1 after it.
  auto angles = torch::zeros({L, d / 2}, torch::kFloat64);
  auto angle = angles.accessor<double, 2>();
  for (std::int64_t t = 0; t < L; ++t) {
    double base = theta, p = static_cast<double>(t);
    if (rope_type == "linear") p /= rs["factor"].get<double>();
    if (rope_type == "dynamic") {
      const double factor = rs["factor"], max_pos = cfg["max_position_embeddings"];
      const double n = prefill == 0 ? L : t < prefill ? prefill : t + 1;
      if (n > max_pos) base = theta * std::pow(factor * n / max_pos - (factor - 1), double(d) / (d - 2));
    }
    for (std::int64_t i = 0; i < d / 2; ++i) angle[t][i] = p / std::pow(base, 2.0 * i / d);
  }
  if (rope_type == "llama3") {
    const double factor = rs["factor"], low = rs["low_freq_factor"], high = rs["high_freq_factor"];
    const double old_len = rs["original_max_position_embeddings"];
    for (auto& f0 : inv_freq) {
      const double wavelen = 2 * M_PI / f0;
      if (wavelen < old_len / high) continue;
      if (wavelen > old_len / low) {
        f0 /= factor;
        continue;
      }
      const double s = (old_len / wavelen - low) / (high - low);
      f0 = (1 - s) * f0 / factor + s * f0;
    }
    auto pos = torch::arange(L, torch::kFloat64).unsqueeze(1);
    angles = pos * torch::tensor(inv_freq, torch::kFloat64).unsqueeze(0);  // [L, d/2]
  }
  auto cos = angles.cos(), sin = angles.sin();
  auto rope = [&](const torch::Tensor& t) {  // [heads, L, d]
    auto x1 = t.narrow(-1, 0, d / 2), x2 = t.narrow(-1, d / 2, d / 2);
    return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
  };
  auto rms = [&](const torch::Tensor& x, const std::string& w) {
    return W(w) * (x / torch::sqrt(x.pow(2).mean(-1, true) + eps));
  };
  auto lin = [&](const torch::Tensor& x, const std::string& w) { return torch::matmul(x, W(w).t()); };

  auto x = W("model.embed_tokens.weight").index_select(0, torch::tensor(ids_v)) * emb_mult;
  auto causal = torch::ones({L, L}, torch::kBool).tril();
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto h = rms(x, p + "input_layernorm.weight");
    auto q = rope(lin(h, p + "self_attn.q_proj.weight").view({L, nh, d}).transpose(0, 1));
    auto k = rope(lin(h, p + "self_attn.k_proj.weight").view({L, nkv, d}).transpose(0, 1));
    auto v = lin(h, p + "self_attn.v_proj.weight").view({L, nkv, d}).transpose(0, 1);
    std::vector<torch::Tensor> heads;
    for (std::int64_t i = 0; i < nh; ++i) {
      const std::int64_t j = i / (nh / nkv);
      auto scores = torch::matmul(q[i], k[j].t()) * attn_mult;
      scores = scores.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(torch::matmul(torch::softmax(scores, -1), v[j]));
    }
    auto ctx = torch::cat(heads, 1);  // [L, nh * d]
    x = x + lin(ctx, p + "self_attn.o_proj.weight") * res_mult;
    h = rms(x, p + "post_attention_layernorm.weight");
    auto act = torch::silu(lin(h, p + "mlp.gate_proj.weight")) * lin(h, p + "mlp.up_proj.weight");
    x = x + lin(act, p + "mlp.down_proj.weight") * res_mult;
  }
  const std::string head = cfg.value("tie_word_embeddings", false) ? "model.embed_tokens.weight" : "lm_head.weight";
  auto logits = (lin(rms(x, "model.norm.weight"), head) / logit_scale).to(torch::kFloat32).contiguous();
  return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

// All-position logits of one unpadded sequence.
std::vector<float> model_logits(LlamaModel& m, const std::vector<std::int64_t>& ids) {
  const std::int64_t L = ids.size();
  auto cache = m.new_cache(1, L);
  std::vector<std::int64_t> pos(L), mask(L, 1);
  for (std::int64_t t = 0; t < L; ++t) pos[t] = t;
  std::vector<float> logits;
  m.forward(ids.data(), pos.data(), mask.data(), 1, L, *cache, true, logits);
  return logits;
}

// Prompts of different lengths decoded together (left-padded) and one by one: same tokens, same logits,
// on the sgemm and on the torch path.
void expect_batch_matches_rows_alone(const std::string& dir, const std::vector<std::vector<std::int64_t>>& prompts,
                                     int steps) {
  for (bool fast : {true, false}) {
    ops::set_onednn_sgemm_enabled(fast);
    auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
    ops::set_onednn_sgemm_enabled(true);
    auto batched = testing::generate(*model, prompts, steps);
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      auto alone = testing::generate(*model, {prompts[b]}, steps);
      EXPECT_EQ(batched.tokens[b], alone.tokens[0]) << dir << " row " << b;
      for (int s = 0; s < steps; ++s) {
        EXPECT_LT(max_abs_diff(batched.step_logits[b][s], alone.step_logits[0][s]), 1e-5f)
            << dir << (fast ? " sgemm" : " torch") << " row " << b << " step " << s;
      }
    }
  }
}

// The torch path's logits of one sequence.
std::vector<float> torch_path_logits(const std::string& dir, const std::vector<std::int64_t>& ids) {
  ops::set_onednn_sgemm_enabled(false);
  auto slow = LlamaModel::load({dir, DType::fp32, "cpu"});
  ops::set_onednn_sgemm_enabled(true);
  return model_logits(*slow, ids);
}

// The fast path's activations against torch's own (gelu "tanh", silu): one row wide enough to be
// split over the threads, and several rows with a row stride wider than the row.
TEST(ActivationRows, MatchTorchForOneRowAndStridedRows) {
  at::set_num_threads(2);
  for (const std::int64_t rows : {1, 5}) {
    const std::int64_t n = 3072, ld = rows == 1 ? n : n + 7;
    const torch::Tensor x = torch::randn({rows, ld}) * 4;  // |x| up to ~16: both tails of the curves
    torch::Tensor got = x.clone();
    ops::gelu_tanh_rows(got.data_ptr<float>(), rows, n, ld);
    const torch::Tensor want = torch::gelu(x.narrow(1, 0, n), "tanh");
    EXPECT_LT((got.narrow(1, 0, n) - want).abs().max().item<float>(), 1e-5f) << rows << " rows";
    EXPECT_TRUE(torch::equal(got.narrow(1, n, ld - n), x.narrow(1, n, ld - n))) << "wrote past n";

    const torch::Tensor gu = torch::randn({rows, 2 * n}) * 4;
    torch::Tensor out = torch::empty({rows, n});
    ops::gated_activation_rows(gu.data_ptr<float>(), out.data_ptr<float>(), rows, n, ops::GateActivation::silu);
    const torch::Tensor silu = torch::silu(gu.narrow(1, 0, n)) * gu.narrow(1, n, n);
    EXPECT_LT((out - silu).abs().max().item<float>(), 1e-4f) << rows << " rows";
    ops::gated_activation_rows(gu.data_ptr<float>(), out.data_ptr<float>(), rows, n, ops::GateActivation::gelu_tanh);
    const torch::Tensor gelu = torch::gelu(gu.narrow(1, 0, n), "tanh") * gu.narrow(1, n, n);
    EXPECT_LT((out - gelu).abs().max().item<float>(), 1e-4f) << rows << " rows";
  }
}

TEST_F(TinyLlama, MakeModelWritesLoadableDeterministicCheckpoints) {
  auto model = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  const LlamaConfig& c = model->config();
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_type, "");
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, -1);
  EXPECT_DOUBLE_EQ(c.embedding_multiplier, 1.0);
  EXPECT_STREQ(model->compute_dtype(), "float32");

  auto granite = LlamaModel::load({granite_dir(), DType::fp32, "cpu"});
  const LlamaConfig& g = granite->config();
  EXPECT_EQ(g.model_type, "granite");
  EXPECT_EQ(g.architectures, std::vector<std::string>{"GraniteForCausalLM"});
  EXPECT_DOUBLE_EQ(g.embedding_multiplier, 12.0);
  EXPECT_DOUBLE_EQ(g.attention_multiplier, 0.125);
  EXPECT_DOUBLE_EQ(g.residual_multiplier, 0.22);
  EXPECT_DOUBLE_EQ(g.logits_scaling, 8.0);

  SafetensorsFile f((fs::path(llama_dir()) / "model.safetensors").string());
  EXPECT_EQ(f.tensors().size(), 1u + 2u * 9u + 2u);
  ASSERT_NE(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<std::int64_t>{32, 64}));

  // Same seed, same bytes; another seed, other bytes.
  auto bytes = [](const std::string& dir) {
    std::ifstream in(fs::path(dir) / "model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  make_llama_checkpoint((*root_ / "again").string(), "tiny-llama", 11, kVocab);
  make_llama_checkpoint((*root_ / "other").string(), "tiny-llama", 12, kVocab);
  EXPECT_EQ(bytes((*root_ / "again").string()), bytes(llama_dir()));
  EXPECT_NE(bytes((*root_ / "other").string()), bytes(llama_dir()));

  EXPECT_NE(input_error([&] { make_llama_checkpoint((*root_ / "x").string(), "llama-7b", 1); }).find("llama-7b"),
            std::string::npos);
  EXPECT_NE(input_error([&] { make_llama_checkpoint((*root_ / "x").string(), "tiny-llama", 1, 2); }).find("vocab_size"),
            std::string::npos);
}

TEST_F(TinyLlama, LlamaAndGraniteMatchNaiveForward) {
  for (const auto& dir : {llama_dir(), granite_dir()}) {
    auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
    for (std::int64_t len : {1, 9, 40}) {
      auto ids = sequence(len, len);
      auto got = model_logits(*model, ids);
      auto want = naive_logits(dir, ids);
      EXPECT_LT(max_abs_diff(got, want), 1e-5f) << dir << " len " << len;
      EXPECT_GT(std::fabs(got[0] - got[1]), 1e-6f);  // not constant
    }
  }
}

// Each Granite multiplier is applied where transformers applies it: switching any one of them back
// to its Llama value changes the logits, and the naive model with the same config still agrees.
TEST_F(TinyLlama, GraniteMultipliersEachMatter) {
  const auto ids = sequence(20, 3);
  auto base = model_logits(*LlamaModel::load({granite_dir(), DType::fp32, "cpu"}), ids);
  const std::vector<std::pair<std::string, std::function<void(json&)>>> edits = {
      {"as-llama",
       [](json& c) {
         c["model_type"] = "llama";
         c["architectures"] = {"LlamaForCausalLM"};
       }},
      {"no-embedding-multiplier", [](json& c) { c["embedding_multiplier"] = 1.0; }},
      {"attention-1-over-sqrt-d", [](json& c) { c["attention_multiplier"] = 0.25; }},
      {"no-residual-multiplier", [](json& c) { c["residual_multiplier"] = 1.0; }},
      {"no-logits-scaling", [](json& c) { c["logits_scaling"] = 1.0; }},
  };
  for (const auto& [name, edit] : edits) {
    const std::string dir = config_copy(granite_dir(), "granite-" + name, edit);
    auto got = model_logits(*LlamaModel::load({dir, DType::fp32, "cpu"}), ids);
    EXPECT_GT(max_abs_diff(got, base), 1e-3f) << name;
    EXPECT_LT(max_abs_diff(got, naive_logits(dir, ids)), 1e-5f) << name;
  }
}

TEST_F(TinyLlama, CachedDecodeMatchesFullRecompute) {
  for (const auto& dir : {llama_dir(), granite_dir()}) {
    auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
    const auto seq = sequence(30, 5);
    const auto full = model_logits(*model, seq);  // teacher-forced single forward
    // Prompt of 6, then 24 forced single-token steps.
    std::vector<std::int64_t> prompt(seq.begin(), seq.begin() + 6);
    std::vector<std::vector<std::int64_t>> forced = {std::vector<std::int64_t>(seq.begin() + 6, seq.end())};
    auto gen = testing::generate(*model, {prompt}, 24, &forced);
    for (int s = 0; s < 24; ++s) {
      EXPECT_LT(max_abs_diff(gen.step_logits[0][s].data(), full.data() + (5 + s) * kVocab, kVocab), 1e-5f)
          << dir << " step " << s;
    }
    // Chunks of several tokens on top of a filled cache (causal inside the chunk).
    auto cache = model->new_cache(1, 30);
    std::int64_t done = 0;
    for (std::int64_t chunk : {7, 1, 5, 9, 8}) {
      std::vector<std::int64_t> pos(chunk), mask(done + chunk, 1);
      for (std::int64_t t = 0; t < chunk; ++t) pos[t] = done + t;
      std::vector<float> logits;
      model->forward(seq.data() + done, pos.data(), mask.data(), 1, chunk, *cache, true, logits);
      EXPECT_LT(max_abs_diff(logits.data(), full.data() + done * kVocab, chunk * kVocab), 1e-5f) << dir << " chunk at " << done;
      done += chunk;
      EXPECT_EQ(cache->length(), done);
    }
  }
}

TEST_F(TinyLlama, LeftPaddedBatchMatchesRowsAlone) {
  expect_batch_matches_rows_alone(granite_dir(), {sequence(3, 1), sequence(11, 2), sequence(1, 3), sequence(7, 4)}, 6);
}

// bfloat16: decode steps of up to 8 rows run on the AVX512-BF16 row kernel, prefill on at::linear;
// a row's tokens must not depend on the rows beside it, its logits only by bfloat16 rounding.
TEST_F(TinyLlama, Bf16BatchedDecodeMatchesRowsAlone) {
  auto model = LlamaModel::load({granite_dir(), DType::bf16, "cpu"});
  const std::vector<std::vector<std::int64_t>> prompts = {sequence(3, 1), sequence(11, 2), sequence(1, 3),
                                                          sequence(7, 4)};
  const int steps = 6;
  auto batched = testing::generate(*model, prompts, steps);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    auto alone = testing::generate(*model, {prompts[b]}, steps);
    EXPECT_EQ(batched.tokens[b], alone.tokens[0]) << "row " << b;
    float scale = 0;
    for (float v : alone.step_logits[0][0]) scale = std::max(scale, std::fabs(v));
    for (int s = 0; s < steps; ++s) {
      EXPECT_LT(max_abs_diff(batched.step_logits[b][s], alone.step_logits[0][s]), 0.02f * scale)
          << "row " << b << " step " << s;
    }
  }
}

TEST_F(TinyLlama, TorchFallbackPathMatchesOneDnnPath) {
  auto fast = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  ops::set_onednn_sgemm_enabled(false);
  auto slow = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  ops::set_onednn_sgemm_enabled(true);
  const auto ids = sequence(17, 9);
  EXPECT_LT(max_abs_diff(model_logits(*fast, ids), model_logits(*slow, ids)), 1e-5f);
  auto hf = fast->hidden_states(ids.data(), 1, 17), hs = slow->hidden_states(ids.data(), 1, 17);
  ASSERT_EQ(hf.size(), 3u);
  ASSERT_EQ(hs.size(), 3u);
  for (std::size_t i = 0; i < hf.size(); ++i) EXPECT_LT(max_abs_diff(hf[i], hs[i]), 1e-5f) << i;
}

TEST_F(TinyLlama, Llama3RopeScalingMatchesFormula) {
  auto with_scaling = [](double factor, const char* type_key) {
    return [=](json& c) {
      c["rope_scaling"] = {{type_key, "llama3"},
                           {"factor", factor},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 64}};
    };
  };
  // head_dim 16, theta 1e4: wavelengths 6.3, 20, 63, 199, ... against 64/4 = 16 and 64/1 = 64: one
  // frequency kept, two interpolated, five divided by the factor.
  const std::string scaled_dir = config_copy(llama_dir(), "llama3-rope", with_scaling(8.0, "rope_type"));
  const std::string legacy_key_dir = config_copy(llama_dir(), "llama3-rope-type", with_scaling(8.0, "type"));
  const std::string unit_dir = config_copy(llama_dir(), "llama3-rope-1", with_scaling(1.0, "rope_type"));
  auto scaled = LlamaModel::load({scaled_dir, DType::fp32, "cpu"});
  EXPECT_EQ(scaled->config().rope_type, "llama3");
  EXPECT_EQ(scaled->config().rope_original_max_position_embeddings, 64);
  auto plain = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  const std::int64_t L = 300;
  const auto ids = sequence(L, 8);
  const auto got = model_logits(*scaled, ids);
  const auto base = model_logits(*plain, ids);
  EXPECT_LT(max_abs_diff(got, naive_logits(scaled_dir, ids)), 1e-4f);
  EXPECT_EQ(max_abs_diff(got, model_logits(*LlamaModel::load({legacy_key_dir, DType::fp32, "cpu"}), ids)), 0.0f);
  // Position 0 is not rotated at all; later positions see the slower low frequencies.
  EXPECT_EQ(max_abs_diff(got.data(), base.data(), kVocab), 0.0f);
  EXPECT_GT(max_abs_diff(got.data() + (L - 50) * kVocab, base.data() + (L - 50) * kVocab, 50 * kVocab), 1e-3f);
  // factor 1 is no scaling.
  EXPECT_LT(max_abs_diff(model_logits(*LlamaModel::load({unit_dir, DType::fp32, "cpu"}), ids), base), 1e-5f);
}

// rope_scaling type linear (transformers 4.39's LlamaLinearScalingRotaryEmbedding): the positions are
// divided by factor before the rotation.
TEST_F(TinyLlama, LinearRopeScalingDividesPositions) {
  auto with_scaling = [](const char* type_key, double factor) {
    return [=](json& c) { c["rope_scaling"] = {{type_key, "linear"}, {"factor", factor}}; };
  };
  const std::string dir = config_copy(llama_dir(), "linear-rope", with_scaling("type", 4.0));
  const std::string rope_type_dir = config_copy(llama_dir(), "linear-rope-type", with_scaling("rope_type", 4.0));
  const std::string half_dir = config_copy(llama_dir(), "linear-rope-2", with_scaling("type", 2.0));
  auto scaled = LlamaModel::load({dir, DType::fp32, "cpu"});
  EXPECT_EQ(scaled->config().rope_type, "linear");
  EXPECT_DOUBLE_EQ(scaled->config().rope_factor, 4.0);
  auto plain = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  const std::int64_t L = 40;
  const auto ids = sequence(L, 2);
  const auto got = model_logits(*scaled, ids);
  const auto base = model_logits(*plain, ids);
  EXPECT_LT(max_abs_diff(got, naive_logits(dir, ids)), 1e-5f);
  EXPECT_EQ(max_abs_diff(got, model_logits(*LlamaModel::load({rope_type_dir, DType::fp32, "cpu"}), ids)), 0.0f);
  EXPECT_EQ(max_abs_diff(got.data(), base.data(), kVocab), 0.0f);  // position 0 is not rotated
  EXPECT_GT(max_abs_diff(got, base), 1e-3f);
  EXPECT_LT(max_abs_diff(got, torch_path_logits(dir, ids)), 1e-5f);

  // Factor 2 at positions 0, 2, 4, ... is the unscaled model at 0, 1, 2, ... (t exactly, in float).
  {
    auto two = LlamaModel::load({half_dir, DType::fp32, "cpu"});
    std::vector<std::int64_t> even(L), mask(L, 1);
    for (std::int64_t t = 0; t < L; ++t) even[t] = 2 * t;
    auto cache = two->new_cache(1, L);
    std::vector<float> logits;
    two->forward(ids.data(), even.data(), mask.data(), 1, L, *cache, true, logits);
    EXPECT_EQ(max_abs_diff(logits, base), 0.0f);
  }

  // Decoding through the cache equals the full forward.
  const std::vector<std::vector<std::int64_t>> forced = {std::vector<std::int64_t>(ids.begin() + 6, ids.end())};
  auto gen = testing::generate(*scaled, {std::vector<std::int64_t>(ids.begin(), ids.begin() + 6)}, L - 6, &forced);
  for (std::int64_t s = 0; s < L - 6; ++s) {
    EXPECT_LT(max_abs_diff(gen.step_logits[0][s].data(), got.data() + (5 + s) * kVocab, kVocab), 1e-5f) << s;
  }
  expect_batch_matches_rows_alone(dir, {sequence(3, 1), sequence(17, 2), sequence(1, 3), sequence(9, 4)}, 6);
}

// rope_scaling type dynamic (transformers 4.39's LlamaDynamicNTKScalingRotaryEmbedding): a forward call
// reaching length n > max_position_embeddings rotates its q / k with the base
// theta * (factor n / max_pos - (factor - 1))^(d / (d - 2)); keys already cached keep theirs.
TEST_F(TinyLlama, DynamicRopeScalingRecomputesPerCall) {
  const std::string dir = config_copy(llama_dir(), "dynamic-rope", [](json& c) {
    c["max_position_embeddings"] = 16;
    c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  });
  auto scaled = LlamaModel::load({dir, DType::fp32, "cpu"});
  EXPECT_EQ(scaled->config().rope_type, "dynamic");
  auto plain = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  // Up to max_position_embeddings: no scaling.
  const auto short_ids = sequence(16, 4);
  EXPECT_EQ(max_abs_diff(model_logits(*scaled, short_ids), model_logits(*plain, short_ids)), 0.0f);

  // A prefill of 40: every position rotates with the base of n = 40, i.e. the unscaled model with
  // that rope_theta (head_dim 16).
  const std::int64_t L = 40;
  const auto ids = sequence(L, 5);
  const double theta40 = 10000.0 * std::pow(2.0 * L / 16.0 - 1.0, 16.0 / 14.0);
  const std::string theta_dir = config_copy(llama_dir(), "dynamic-as-theta", [&](json& c) { c["rope_theta"] = theta40; });
  const auto got = model_logits(*scaled, ids);
  EXPECT_LT(max_abs_diff(got, model_logits(*LlamaModel::load({theta_dir, DType::fp32, "cpu"}), ids)), 1e-4f);
  EXPECT_LT(max_abs_diff(got, naive_logits(dir, ids)), 1e-4f);
  EXPECT_GT(max_abs_diff(got, model_logits(*plain, ids)), 1e-3f);
  EXPECT_LT(max_abs_diff(got, torch_path_logits(dir, ids)), 1e-5f);

  // A prompt of 10, then one token per call: the call feeding position t (> 15) rotates it with the base
  // of n = t + 1 while the cached keys keep the ones they had, which differs from one prefill of it all.
  const std::int64_t P = 10, steps = 30;
  const auto seq = sequence(P + steps, 6);
  const std::vector<std::vector<std::int64_t>> forced = {std::vector<std::int64_t>(seq.begin() + P, seq.end())};
  const std::vector<std::int64_t> fed(seq.begin(), seq.end() - 1);
  const auto want = naive_logits(dir, fed, P);
  const auto one_call = model_logits(*scaled, fed);
  for (bool fast : {true, false}) {
    ops::set_onednn_sgemm_enabled(fast);
    auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
    ops::set_onednn_sgemm_enabled(true);
    auto gen = testing::generate(*model, {std::vector<std::int64_t>(seq.begin(), seq.begin() + P)}, steps, &forced);
    float past_max = 0;
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t t = P - 1 + s;  // the position whose logits chose step s
      EXPECT_LT(max_abs_diff(gen.step_logits[0][s].data(), want.data() + t * kVocab, kVocab), 1e-4f)
          << (fast ? "sgemm" : "torch") << " step " << s;
      if (t >= 16) past_max = std::max(past_max, max_abs_diff(gen.step_logits[0][s].data(), one_call.data() + t * kVocab, kVocab));
    }
    EXPECT_GT(past_max, 1e-3f);
  }
  // Each row of a batch takes its length from its own positions (transformers' result for the row alone).
  expect_batch_matches_rows_alone(dir, {sequence(30, 1), sequence(5, 2), sequence(18, 3)}, 6);
}

// Mixtral's expert load (what -v logs at the end of a run): every real token fed through forward counts
// once for each of the num_experts_per_tok experts it is routed to, padding rows not at all, so a
// left-padded batch counts what its rows count alone; hidden_states (calibration) counts nothing.
TEST_F(TinyLlama, MixtralExpertLoadCountsRealTokensPerLayer) {
  const std::string dir = (*root_ / "mixtral").string();
  make_llama_checkpoint(dir, "tiny-mixtral", 11, kVocab);
  const std::vector<std::vector<std::int64_t>> prompts = {sequence(3, 1), sequence(11, 2), sequence(7, 3)};
  const int steps = 5;
  using Load = std::vector<std::vector<std::int64_t>>;
  auto run = [&](const std::vector<std::vector<std::int64_t>>& ps, bool fast) {
    ops::set_onednn_sgemm_enabled(fast);
    auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
    ops::set_onednn_sgemm_enabled(true);
    EXPECT_TRUE(model->expert_load().empty());
    testing::generate(*model, ps, steps);
    const Load load = model->expert_load();
    const auto ids = sequence(9, 7);
    model->hidden_states(ids.data(), 1, 9);
    EXPECT_EQ(model->expert_load(), load);
    model->log_expert_load();
    return load;
  };
  const Load batched = run(prompts, true);
  const std::int64_t K = 2, E = 4;
  std::int64_t tokens = 0;  // the prompts, then one token per row and step but the last
  for (const auto& p : prompts) tokens += static_cast<std::int64_t>(p.size()) + steps - 1;
  ASSERT_EQ(batched.size(), 2u);
  for (const auto& layer : batched) {
    ASSERT_EQ(static_cast<std::int64_t>(layer.size()), E);
    std::int64_t sum = 0, used = 0;
    for (std::int64_t n : layer) {
      EXPECT_LE(n, tokens);  // a token goes to k different experts
      sum += n;
      used += n > 0;
    }
    EXPECT_EQ(sum, tokens * K);
    EXPECT_GE(used, 3);
  }
  Load alone(2, std::vector<std::int64_t>(E, 0));
  for (const auto& p : prompts) {
    const Load one = run({p}, true);
    for (std::size_t l = 0; l < one.size(); ++l) {
      for (std::int64_t e = 0; e < E; ++e) alone[l][e] += one[l][e];
    }
  }
  EXPECT_EQ(batched, alone);
  EXPECT_EQ(run(prompts, false), batched);  // the torch path routes and counts the same
}

TEST_F(TinyLlama, Bf16AndFp16CloseToFp32) {
  auto ref = LlamaModel::load({granite_dir(), DType::fp32, "cpu"});
  auto bf16 = LlamaModel::load({granite_dir(), DType::bf16, "cpu"});
  auto fp16 = LlamaModel::load({granite_dir(), DType::fp16, "cpu"});
  EXPECT_STREQ(bf16->compute_dtype(), "bfloat16");
  EXPECT_STREQ(fp16->compute_dtype(), "float32");
  const auto ids = sequence(24, 6);
  const auto want = model_logits(*ref, ids);
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  const float d_bf16 = max_abs_diff(model_logits(*bf16, ids), want);
  const float d_fp16 = max_abs_diff(model_logits(*fp16, ids), want);
  std::printf("max |logit| %.3g; bf16 max |diff| %.3g, fp16 %.3g\n", scale, d_bf16, d_fp16);
  EXPECT_LT(d_bf16, 0.05f * scale);
  EXPECT_GT(d_bf16, 0.0f);  // really computed in bfloat16
  EXPECT_LT(d_fp16, 0.005f * scale);
  // bf16 decoding through the cache agrees with its own full recompute.
  const std::vector<std::vector<std::int64_t>> forced = {std::vector<std::int64_t>(ids.begin() + 10, ids.end())};
  auto gen = testing::generate(*bf16, {std::vector<std::int64_t>(ids.begin(), ids.begin() + 10)}, 14, &forced);
  const auto full = model_logits(*bf16, ids);
  for (int s = 0; s < 14; ++s) {
    EXPECT_LT(max_abs_diff(gen.step_logits[0][s].data(), full.data() + (9 + s) * kVocab, kVocab), 0.02f * scale) << s;
  }
}

TEST_F(TinyLlama, ErrorsNameTheKeyOrTensor) {
  auto load_error = [&](const std::string& dir) {
    return input_error([&] { LlamaModel::load({dir, DType::fp32, "cpu"}); });
  };
  auto has = [](const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; };

  std::string e = load_error(config_copy(llama_dir(), "arch", [](json& c) { c["architectures"] = {"MistralForCausalLM"}; }));
  EXPECT_TRUE(has(e, "architectures") && has(e, "MistralForCausalLM")) << e;
  e = load_error(config_copy(llama_dir(), "arch-mismatch", [](json& c) { c["architectures"] = {"GraniteForCausalLM"}; }));
  EXPECT_TRUE(has(e, "architectures") && has(e, "model_type")) << e;
  e = load_error(config_copy(llama_dir(), "type", [](json& c) { c["model_type"] = "mistral"; }));
  EXPECT_TRUE(has(e, "model_type") && has(e, "mistral")) << e;
  e = load_error(config_copy(llama_dir(), "yarn", [](json& c) {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  }));
  EXPECT_TRUE(has(e, "rope_scaling") && has(e, "yarn")) << e;
  e = load_error(config_copy(llama_dir(), "llama3-incomplete", [](json& c) {
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
  }));
  EXPECT_TRUE(has(e, "low_freq_factor")) << e;
  e = load_error(config_copy(llama_dir(), "linear-no-factor", [](json& c) { c["rope_scaling"] = {{"type", "linear"}}; }));
  EXPECT_TRUE(has(e, "rope_scaling.factor") && has(e, "missing")) << e;
  e = load_error(config_copy(llama_dir(), "dynamic-string-factor", [](json& c) {
    c["rope_scaling"] = {{"type", "dynamic"}, {"factor", "2"}};
  }));
  EXPECT_TRUE(has(e, "rope_scaling.factor") && has(e, "\"2\"")) << e;
  e = load_error(config_copy(llama_dir(), "linear-small-factor", [](json& c) {
    c["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
  }));
  EXPECT_TRUE(has(e, "rope_scaling.factor") && has(e, "0.5")) << e;
  {  // Mistral in transformers 4.39 has no rope scaling: refused, not ignored.
    const std::string mistral = (*root_ / "mistral").string();
    make_llama_checkpoint(mistral, "tiny-mistral", 11, kVocab);
    e = load_error(config_copy(mistral, "mistral-linear", [](json& c) {
      c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    }));
    EXPECT_TRUE(has(e, "rope_scaling") && has(e, "linear") && has(e, "mistral")) << e;
  }
  e = load_error(config_copy(llama_dir(), "bias", [](json& c) { c["attention_bias"] = true; }));
  EXPECT_TRUE(has(e, "attention_bias")) << e;
  e = load_error(config_copy(llama_dir(), "act", [](json& c) { c["hidden_act"] = "gelu"; }));
  EXPECT_TRUE(has(e, "hidden_act") && has(e, "gelu")) << e;
  e = load_error(config_copy(llama_dir(), "kv", [](json& c) { c["num_key_value_heads"] = 3; }));
  EXPECT_TRUE(has(e, "num_key_value_heads")) << e;
  e = load_error(config_copy(llama_dir(), "gptq", [](json& c) { c["quantization_config"] = {{"bits", 4}}; }));
  EXPECT_TRUE(has(e, "quantization_config")) << e;
  e = load_error(config_copy(llama_dir(), "no-hidden", [](json& c) { c.erase("hidden_size"); }));
  EXPECT_TRUE(has(e, "hidden_size") && has(e, "missing")) << e;

  e = load_error(edited_copy(llama_dir(), "missing", [](std::vector<TensorToWrite>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; }),
            t.end());
  }));
  EXPECT_TRUE(has(e, "model.layers.1.mlp.up_proj.weight") && has(e, "missing")) << e;
  e = load_error(edited_copy(llama_dir(), "shape", [](std::vector<TensorToWrite>& t) {
    for (auto& x : t) {
      if (x.name == "model.layers.0.self_attn.k_proj.weight") {
        x.shape = {16, 64};
        x.data.resize(16 * 64 * 4);
      }
    }
  }));
  EXPECT_TRUE(has(e, "model.layers.0.self_attn.k_proj.weight") && has(e, "[16, 64]") && has(e, "[32, 64]")) << e;
  e = load_error(edited_copy(llama_dir(), "extra", [](std::vector<TensorToWrite>& t) {
    t.push_back(TensorToWrite{"model.layers.0.self_attn.q_proj.bias", TensorDType::F32, {64},
                              std::vector<std::byte>(64 * 4)});
  }));
  EXPECT_TRUE(has(e, "model.layers.0.self_attn.q_proj.bias") && has(e, "unexpected")) << e;
  e = load_error(edited_copy(llama_dir(), "no-head", [](std::vector<TensorToWrite>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& x) { return x.name == "lm_head.weight"; }), t.end());
  }));
  EXPECT_TRUE(has(e, "lm_head.weight")) << e;
  // Tied: lm_head.weight may be absent and the embeddings are the head.
  const std::string tied = edited_copy(
      llama_dir(), "tied",
      [](std::vector<TensorToWrite>& t) {
        t.erase(std::remove_if(t.begin(), t.end(), [](auto& x) { return x.name == "lm_head.weight"; }), t.end());
      },
      [](json& c) { c["tie_word_embeddings"] = true; });
  auto tied_model = LlamaModel::load({tied, DType::fp32, "cpu"});
  EXPECT_LT(max_abs_diff(model_logits(*tied_model, sequence(5, 1)), naive_logits(tied, sequence(5, 1))), 1e-5f);

  auto model = LlamaModel::load({llama_dir(), DType::fp32, "cpu"});
  auto cache = model->new_cache(1, 4);
  std::vector<std::int64_t> ids = {1, kVocab}, pos = {0, 1}, mask = {1, 1};
  std::vector<float> logits;
  e = input_error([&] { model->forward(ids.data(), pos.data(), mask.data(), 1, 2, *cache, false, logits); });
  EXPECT_TRUE(has(e, "outside the vocabulary")) << e;
  ids = {1, 5, 6, 7, 8};
  pos = {0, 1, 2, 3, 4};
  mask.assign(5, 1);
  EXPECT_THROW(model->forward(ids.data(), pos.data(), mask.data(), 1, 5, *cache, false, logits), std::invalid_argument);
  EXPECT_EQ(cache->length(), 0);
}

}  // namespace
}  // namespace evalrun
