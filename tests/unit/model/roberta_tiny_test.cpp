// RoBERTa on checkpoints the project makes itself (no shared data needed): make_model round trip,
// agreement with a naive torch implementation of HF's forward, batch / padding invariance, bf16 and
// fp16, and the loader's and config's error messages.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "ops/gemm.hpp"
#include "fixtures/make_model.hpp"
#include "model/roberta.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
constexpr std::int64_t kVocab = 120;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class TinyRoberta : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(testing::make_temp_dir("evalrun-model-test"));
    make_roberta_checkpoint((*root_ / "qa").string(), "tiny", EncoderHead::question_answering, 7, kVocab);
    make_roberta_checkpoint((*root_ / "mlm").string(), "tiny", EncoderHead::masked_lm, 8, kVocab);
  }
  static void TearDownTestSuite() {
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (root_ == nullptr) return;
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string qa_dir() { return (*root_ / "qa").string(); }
  static std::string mlm_dir() { return (*root_ / "mlm").string(); }

  // A copy of `src` whose safetensors tensors and config.json went through the edit functions.
  static std::string edited_copy(const std::string& src, const std::string& name,
                                 const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors,
                                 const std::function<void(nlohmann::json&)>& edit_config = nullptr) {
    const fs::path dst = *root_ / name;
    fs::create_directories(dst);
    SafetensorsFile file((fs::path(src) / "model.safetensors").string());
    std::vector<TensorToWrite> tensors;
    for (const auto& [n, v] : file.tensors()) {
      TensorToWrite t{n, v.dtype, v.shape, std::vector<std::byte>(v.data, v.data + v.nbytes)};
      tensors.push_back(std::move(t));
    }
    if (edit_tensors) edit_tensors(tensors);
    write_safetensors((dst / "model.safetensors").string(), tensors);
    std::ifstream in(fs::path(src) / "config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    if (edit_config) edit_config(cfg);
    std::ofstream(dst / "config.json") << cfg.dump(2);
    return dst.string();
  }

  static fs::path* root_;
};
fs::path* TinyRoberta::root_ = nullptr;

std::vector<std::int64_t> sequence(std::int64_t len, std::int64_t salt) {
  std::vector<std::int64_t> ids(len);
  ids[0] = 0;
  for (std::int64_t t = 1; t + 1 < len; ++t) ids[t] = 4 + (t * 37 + salt * 11) % (kVocab - 4);
  ids[len - 1] = 2;
  return ids;
}

// Error message of `f`, which must throw InputError.
std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return "";
}

// HF RobertaForQuestionAnswering written out naively with torch ops on the checkpoint's tensors.
void naive_qa(const std::string& dir, const std::vector<std::int64_t>& ids_v, std::vector<float>& start,
              std::vector<float>& end) {
  torch::InferenceMode guard;
  SafetensorsFile f((fs::path(dir) / "model.safetensors").string());
  auto W = [&](const std::string& n) {
    const TensorView& v = *f.find(n);
    return torch::from_blob(const_cast<std::byte*>(v.data), v.shape, torch::kFloat32).clone();
  };
  const std::int64_t L = ids_v.size(), H = 32, nh = 4, d = 8;
  auto ids = torch::tensor(ids_v);
  auto not_pad = (ids != 1).to(torch::kInt64);
  auto pos = torch::cumsum(not_pad, 0) * not_pad + 1;
  auto x = W("roberta.embeddings.word_embeddings.weight").index_select(0, ids) +
           W("roberta.embeddings.token_type_embeddings.weight")[0];
  x = x + W("roberta.embeddings.position_embeddings.weight").index_select(0, pos);
  auto ln = [&](const torch::Tensor& t, const std::string& p) {
    return torch::layer_norm(t, {H}, W(p + ".weight"), W(p + ".bias"), 1e-5);
  };
  auto lin = [&](const torch::Tensor& t, const std::string& p) { return torch::linear(t, W(p + ".weight"), W(p + ".bias")); };
  x = ln(x, "roberta.embeddings.LayerNorm");
  for (int i = 0; i < 2; ++i) {
    const std::string p = "roberta.encoder.layer." + std::to_string(i) + ".";
    auto heads = [&](const torch::Tensor& t) { return t.view({L, nh, d}).permute({1, 0, 2}); };
    auto q = heads(lin(x, p + "attention.self.query"));
    auto k = heads(lin(x, p + "attention.self.key"));
    auto v = heads(lin(x, p + "attention.self.value"));
    auto probs = torch::softmax(torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(8.0), -1);
    auto ctx = torch::matmul(probs, v).permute({1, 0, 2}).reshape({L, H});
    auto a = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm");
    auto inter = torch::gelu(lin(a, p + "intermediate.dense"));
    x = ln(lin(inter, p + "output.dense") + a, p + "output.LayerNorm");
  }
  auto logits = lin(x, "qa_outputs").contiguous();
  auto s = logits.select(1, 0).contiguous(), e = logits.select(1, 1).contiguous();
  start.assign(s.data_ptr<float>(), s.data_ptr<float>() + L);
  end.assign(e.data_ptr<float>(), e.data_ptr<float>() + L);
}

TEST_F(TinyRoberta, MakeModelWritesLoadableDeterministicCheckpoint) {
  auto model = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  EXPECT_EQ(model->head(), EncoderHead::question_answering);
  EXPECT_EQ(model->config().hidden_size, 32);
  EXPECT_EQ(model->config().num_hidden_layers, 2);
  EXPECT_EQ(model->config().num_attention_heads, 4);
  EXPECT_EQ(model->config().intermediate_size, 64);
  EXPECT_EQ(model->config().vocab_size, kVocab);
  EXPECT_EQ(model->config().max_position_embeddings, 514);
  EXPECT_STREQ(model->compute_dtype(), "float32");

  // Same seed, same bytes; another seed, other bytes.
  const std::string again = (*root_ / "qa-again").string();
  make_roberta_checkpoint(again, "tiny", EncoderHead::question_answering, 7, kVocab);
  EXPECT_EQ(RobertaModel::load({again, DType::fp32, "cpu"})->weights_sha256(), model->weights_sha256());
  const std::string other = (*root_ / "qa-other").string();
  make_roberta_checkpoint(other, "tiny", EncoderHead::question_answering, 8, kVocab);
  EXPECT_NE(RobertaModel::load({other, DType::fp32, "cpu"})->weights_sha256(), model->weights_sha256());

  // The MLM checkpoint is saved tied, like HF.
  SafetensorsFile mlm((fs::path(mlm_dir()) / "model.safetensors").string());
  EXPECT_EQ(mlm.find("lm_head.decoder.weight"), nullptr);
  EXPECT_NE(mlm.find("lm_head.bias"), nullptr);
  EXPECT_EQ(RobertaModel::load({mlm_dir(), DType::fp32, "cpu"})->head(), EncoderHead::masked_lm);

  EXPECT_NE(input_error([&] { make_roberta_checkpoint(again, "huge", EncoderHead::masked_lm, 1); }).find("huge"),
            std::string::npos);
}

TEST_F(TinyRoberta, QuestionAnsweringMatchesNaiveTorchForward) {
  auto model = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  for (std::int64_t len : {3, 17, 40}) {
    auto ids = sequence(len, len);
    std::vector<std::int64_t> mask(len, 1);
    std::vector<float> start, end, want_start, want_end;
    model->question_answering(ids.data(), mask.data(), 1, len, start, end);
    naive_qa(qa_dir(), ids, want_start, want_end);
    EXPECT_LT(max_abs_diff(start, want_start), 1e-5f) << len;
    EXPECT_LT(max_abs_diff(end, want_end), 1e-5f) << len;
    // Not all zero or constant: the head does something.
    EXPECT_GT(std::fabs(start[1] - start[2]) + std::fabs(end[1] - end[2]), 1e-6f);
  }
}

TEST_F(TinyRoberta, TorchFallbackPathMatchesOneDnnPath) {
  // float32 without oneDNN's sgemm (builds without libdnnl) takes the batched torch attention path.
  auto fast = RobertaModel::load({mlm_dir(), DType::fp32, "cpu"});
  ops::set_onednn_sgemm_enabled(false);
  auto slow = RobertaModel::load({mlm_dir(), DType::fp32, "cpu"});
  const std::vector<std::int64_t> lens = {6, 14};
  const std::int64_t seq = 16;
  std::vector<std::int64_t> ids(2 * seq, 1), mask(2 * seq, 0);
  for (std::size_t b = 0; b < lens.size(); ++b) {
    auto s = sequence(lens[b], b);
    for (std::int64_t t = 0; t < lens[b]; ++t) ids[b * seq + t] = s[t], mask[b * seq + t] = 1;
  }
  std::vector<float> a, b;
  slow->masked_lm(ids.data(), mask.data(), 2, seq, {{0, 2}, {1, 9}}, b);
  auto hs_slow = slow->hidden_states(ids.data(), mask.data(), 2, seq);
  ops::set_onednn_sgemm_enabled(true);
  fast->masked_lm(ids.data(), mask.data(), 2, seq, {{0, 2}, {1, 9}}, a);
  auto hs_fast = fast->hidden_states(ids.data(), mask.data(), 2, seq);
  EXPECT_LT(max_abs_diff(a, b), 1e-5f);
  for (std::size_t i = 0; i < hs_fast.size(); ++i) {
    for (std::int64_t r = 0; r < 2; ++r) {  // valid positions only
      std::vector<float> x(hs_fast[i].begin() + r * seq * 32, hs_fast[i].begin() + (r * seq + lens[r]) * 32);
      std::vector<float> y(hs_slow[i].begin() + r * seq * 32, hs_slow[i].begin() + (r * seq + lens[r]) * 32);
      EXPECT_LT(max_abs_diff(x, y), 1e-5f) << "hidden state " << i << " row " << r;
    }
  }
}

TEST_F(TinyRoberta, LogitsDoNotDependOnBatchOrPadding) {
  for (DType dt : {DType::fp32, DType::bf16}) {
    auto qa = RobertaModel::load({qa_dir(), dt, "cpu"});
    auto mlm = RobertaModel::load({mlm_dir(), dt, "cpu"});
    const std::vector<std::int64_t> lens = {9, 23, 5};
    const std::int64_t seq = 30;  // longer than all: every row is padded
    std::vector<std::int64_t> ids(lens.size() * seq, 1), mask(lens.size() * seq, 0);
    for (std::size_t b = 0; b < lens.size(); ++b) {
      auto s = sequence(lens[b], b);
      for (std::int64_t t = 0; t < lens[b]; ++t) ids[b * seq + t] = s[t], mask[b * seq + t] = 1;
    }
    std::vector<float> bs, be, bl;
    qa->question_answering(ids.data(), mask.data(), lens.size(), seq, bs, be);
    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (std::size_t b = 0; b < lens.size(); ++b) pairs.emplace_back(b, lens[b] / 2);
    mlm->masked_lm(ids.data(), mask.data(), lens.size(), seq, pairs, bl);
    const float tol = dt == DType::fp32 ? 1e-5f : 2e-2f;
    float worst = 0;
    for (std::size_t b = 0; b < lens.size(); ++b) {
      auto s = sequence(lens[b], b);
      std::vector<std::int64_t> m(lens[b], 1);
      std::vector<float> st, en, lg;
      qa->question_answering(s.data(), m.data(), 1, lens[b], st, en);
      for (std::int64_t t = 0; t < lens[b]; ++t) {
        worst = std::max({worst, std::fabs(st[t] - bs[b * seq + t]), std::fabs(en[t] - be[b * seq + t])});
      }
      mlm->masked_lm(s.data(), m.data(), 1, lens[b], {{0, lens[b] / 2}}, lg);
      ASSERT_EQ(lg.size(), static_cast<std::size_t>(kVocab));
      for (std::int64_t v = 0; v < kVocab; ++v) worst = std::max(worst, std::fabs(lg[v] - bl[b * kVocab + v]));
    }
    EXPECT_LT(worst, tol) << to_string(dt);
    std::printf("%s: max |alone - padded batch| = %.3g\n", dt == DType::fp32 ? "fp32" : "bf16", worst);
  }
}

TEST_F(TinyRoberta, Bf16AndFp16StayCloseToFp32) {
  auto f32 = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  auto b16 = RobertaModel::load({qa_dir(), DType::bf16, "cpu"});
  auto h16 = RobertaModel::load({qa_dir(), DType::fp16, "cpu"});
  EXPECT_STREQ(b16->compute_dtype(), "bfloat16");
  EXPECT_STREQ(h16->compute_dtype(), "float32");
  auto ids = sequence(64, 3);
  std::vector<std::int64_t> mask(ids.size(), 1);
  std::vector<float> s32, e32, sb, eb, sh, eh;
  f32->question_answering(ids.data(), mask.data(), 1, ids.size(), s32, e32);
  b16->question_answering(ids.data(), mask.data(), 1, ids.size(), sb, eb);
  h16->question_answering(ids.data(), mask.data(), 1, ids.size(), sh, eh);
  const float db = std::max(max_abs_diff(s32, sb), max_abs_diff(e32, eb));
  const float dh = std::max(max_abs_diff(s32, sh), max_abs_diff(e32, eh));
  EXPECT_LT(db, 5e-2f);
  EXPECT_GT(db, 0.0f);  // really ran in bfloat16
  EXPECT_LT(dh, 1e-2f);
  EXPECT_GT(dh, 0.0f);  // the weights really were rounded to float16
  std::printf("max |diff| vs fp32: bf16 %.3g, fp16 weights %.3g\n", db, dh);
}

TEST_F(TinyRoberta, RepeatedCallsGiveIdenticalResults) {
  // Work buffers are reused between calls; nothing of one call may leak into the next (a single
  // MLM position once made the decoder accumulate into its own bias).
  auto mlm = RobertaModel::load({mlm_dir(), DType::fp32, "cpu"});
  auto qa = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  auto ids = sequence(13, 4);
  std::vector<std::int64_t> mask(13, 1);
  std::vector<float> first, second, s1, e1, s2, e2;
  mlm->masked_lm(ids.data(), mask.data(), 1, 13, {{0, 5}}, first);
  mlm->masked_lm(ids.data(), mask.data(), 1, 13, {{0, 5}}, second);
  EXPECT_EQ(first, second);
  qa->question_answering(ids.data(), mask.data(), 1, 13, s1, e1);
  auto big = sequence(40, 1);
  std::vector<std::int64_t> big_mask(40, 1);
  qa->question_answering(big.data(), big_mask.data(), 1, 40, s2, e2);
  qa->question_answering(ids.data(), mask.data(), 1, 13, s2, e2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(e1, e2);
}

TEST_F(TinyRoberta, HiddenStatesHaveOneEntryPerLayerPlusEmbeddings) {
  auto model = RobertaModel::load({mlm_dir(), DType::fp32, "cpu"});
  auto ids = sequence(7, 1);
  std::vector<std::int64_t> mask(7, 1);
  auto hs = model->hidden_states(ids.data(), mask.data(), 1, 7);
  ASSERT_EQ(hs.size(), 3u);
  for (const auto& h : hs) ASSERT_EQ(h.size(), 7u * 32u);
  // After a LayerNorm with weight 1 / bias 0, every row has mean 0.
  double mean = 0;
  for (int i = 0; i < 32; ++i) mean += hs[0][i];
  EXPECT_NEAR(mean / 32, 0.0, 1e-5);
  EXPECT_GT(max_abs_diff(hs[1], hs[2]), 1e-3f);
}

TEST_F(TinyRoberta, WrongHeadAndBadInputsAreClearErrors) {
  auto qa = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  std::vector<std::int64_t> ids = {0, kVocab + 5, 2}, mask = {1, 1, 1};
  std::vector<float> s, e;
  EXPECT_NE(input_error([&] { qa->question_answering(ids.data(), mask.data(), 1, 3, s, e); }).find("outside the vocabulary"),
            std::string::npos);
  std::vector<float> logits;
  ids[1] = 5;
  EXPECT_NE(input_error([&] { qa->masked_lm(ids.data(), mask.data(), 1, 3, {{0, 1}}, logits); })
                .find("RobertaForMaskedLM"),
            std::string::npos);
  std::vector<std::int64_t> long_ids(600, 5), long_mask(600, 1);
  EXPECT_NE(input_error([&] { qa->question_answering(long_ids.data(), long_mask.data(), 1, 600, s, e); })
                .find("max_position_embeddings"),
            std::string::npos);
}

TEST_F(TinyRoberta, LoaderErrorsNameTheTensor) {
  const std::string missing = edited_copy(qa_dir(), "missing", [](auto& ts) {
    std::erase_if(ts, [](const TensorToWrite& t) { return t.name == "roberta.encoder.layer.1.output.dense.bias"; });
  });
  std::string msg = input_error([&] { RobertaModel::load({missing, DType::fp32, "cpu"}); });
  EXPECT_NE(msg.find("roberta.encoder.layer.1.output.dense.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;

  const std::string shape = edited_copy(qa_dir(), "shape", [](auto& ts) {
    for (auto& t : ts) {
      if (t.name == "qa_outputs.weight") t.shape = {4, 16};
    }
  });
  msg = input_error([&] { RobertaModel::load({shape, DType::fp32, "cpu"}); });
  EXPECT_NE(msg.find("qa_outputs.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 32]"), std::string::npos) << msg;

  const std::string extra = edited_copy(qa_dir(), "extra", [](auto& ts) {
    ts.push_back({"roberta.encoder.layer.0.attention.self.rotary", TensorDType::F32, {2}, std::vector<std::byte>(8)});
    ts.push_back({"roberta.pooler.dense.bias", TensorDType::F32, {2}, std::vector<std::byte>(8)});  // harmless
  });
  msg = input_error([&] { RobertaModel::load({extra, DType::fp32, "cpu"}); });
  EXPECT_NE(msg.find("roberta.encoder.layer.0.attention.self.rotary"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected"), std::string::npos) << msg;

  // Unprefixed encoder names (a bare RobertaModel save) load like HF and give the same logits.
  const std::string bare = edited_copy(qa_dir(), "bare", [](auto& ts) {
    for (auto& t : ts) {
      if (t.name.rfind("roberta.", 0) == 0) t.name = t.name.substr(8);
    }
  });
  auto a = RobertaModel::load({qa_dir(), DType::fp32, "cpu"});
  auto b = RobertaModel::load({bare, DType::fp32, "cpu"});
  auto ids = sequence(11, 2);
  std::vector<std::int64_t> mask(11, 1);
  std::vector<float> sa, ea, sb, eb;
  a->question_answering(ids.data(), mask.data(), 1, 11, sa, ea);
  b->question_answering(ids.data(), mask.data(), 1, 11, sb, eb);
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(ea, eb);

  // An untied MLM checkpoint (tie_word_embeddings false) uses its own decoder weight.
  const std::string untied = edited_copy(
      mlm_dir(), "untied",
      [](auto& ts) {
        for (const auto& t : ts) {
          if (t.name == "roberta.embeddings.word_embeddings.weight") {
            TensorToWrite d = t;
            d.name = "lm_head.decoder.weight";
            ts.push_back(d);
            break;
          }
        }
      },
      [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  auto tied = RobertaModel::load({mlm_dir(), DType::fp32, "cpu"});
  auto unt = RobertaModel::load({untied, DType::fp32, "cpu"});
  std::vector<float> lt, lu;
  tied->masked_lm(ids.data(), mask.data(), 1, 11, {{0, 3}}, lt);
  unt->masked_lm(ids.data(), mask.data(), 1, 11, {{0, 3}}, lu);
  EXPECT_EQ(lt, lu);
  const std::string untied_missing = edited_copy(mlm_dir(), "untied-missing", nullptr,
                                                 [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  msg = input_error([&] { RobertaModel::load({untied_missing, DType::fp32, "cpu"}); });
  EXPECT_NE(msg.find("lm_head.decoder.weight"), std::string::npos) << msg;
}

TEST_F(TinyRoberta, ConfigErrorsNameTheKey) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"arch", [](auto& c) { c["architectures"] = {"RobertaForSequenceClassification"}; }, "RobertaForQuestionAnswering"},
      {"heads", [](auto& c) { c["num_attention_heads"] = 5; }, "num_attention_heads"},
      {"act", [](auto& c) { c["hidden_act"] = "swish"; }, "hidden_act"},
      {"postype", [](auto& c) { c["position_embedding_type"] = "relative_key"; }, "position_embedding_type"},
      {"nohidden", [](auto& c) { c.erase("hidden_size"); }, "hidden_size"},
      {"typed", [](auto& c) { c["vocab_size"] = "many"; }, "vocab_size"},
  };
  for (const auto& c : cases) {
    const std::string dir = edited_copy(qa_dir(), std::string("cfg-") + c.name, nullptr, c.edit);
    const std::string msg = input_error([&] { RobertaModel::load({dir, DType::fp32, "cpu"}); });
    EXPECT_NE(msg.find("config.json"), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
  const fs::path bad = *root_ / "cfg-json";
  fs::create_directories(bad);
  std::ofstream(bad / "config.json") << "{\"hidden_size\": ";
  const std::string msg = input_error([&] { RobertaConfig::from_json_file((bad / "config.json").string()); });
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

}  // namespace
}  // namespace evalrun
