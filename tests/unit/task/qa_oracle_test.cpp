// The QA pipeline against the Hugging Face oracle (oracle/roberta-qa, see oracle/README.md): features
// from the real tokenizer, postprocessing of the reference logits, EM/F1, and the JSON files utils_qa wrote.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/hdf5_file.hpp"
#include "io/squad.hpp"
#include "task/qa_features.hpp"
#include "task/qa_postprocess.hpp"
#include "task/squad_metric.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

std::string feature_group(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/features/%02zu", i);
  return buf;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class QaOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string data = testing::shared_data_dir();
    if (data.empty()) GTEST_SKIP() << "EVALRUN_DATA_DIR is not set";
    dir_ = data + "/oracle/roberta-qa";
    ref_ = std::make_unique<H5Reader>(dir_ + "/reference.h5");
    examples_ = read_squad(dir_ + "/squad_subset.json");
  }

  // Features as the reference stores them (independent of our tokenizer): offsets, ids, windows.
  std::vector<QaFeature> reference_features() const {
    const auto ids = ref_->read_strings("/example_ids");
    std::vector<QaFeature> out;
    const auto n = static_cast<std::size_t>(ref_->attr_int("/", "n_features"));
    for (std::size_t i = 0; i < n; ++i) {
      const std::string g = feature_group(i);
      QaFeature f;
      const std::string id = ref_->attr_string(g, "example_id");
      f.example_index = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      f.window = static_cast<int>(ref_->attr_int(g, "window"));
      f.context_token_start = static_cast<int>(ref_->attr_int(g, "context_token_start"));
      f.context_token_stop = static_cast<int>(ref_->attr_int(g, "context_token_stop"));
      f.input_ids = ref_->read_i64(g + "/input_ids");
      f.attention_mask = ref_->read_i64(g + "/attention_mask");
      const auto off = ref_->read_i64(g + "/offset_mapping");
      for (std::size_t k = 0; k + 1 < off.size(); k += 2) {
        f.offsets.emplace_back(static_cast<int>(off[k]), static_cast<int>(off[k + 1]));
      }
      out.push_back(std::move(f));
    }
    return out;
  }

  std::vector<QaPrediction> reference_postprocess(const std::vector<QaFeature>& features) const {
    std::vector<std::vector<float>> start, end;
    for (std::size_t i = 0; i < features.size(); ++i) {
      start.push_back(ref_->read_f32(feature_group(i) + "/start_logits"));
      end.push_back(ref_->read_f32(feature_group(i) + "/end_logits"));
    }
    QaPostprocessOptions opt;
    opt.n_best_size = static_cast<int>(ref_->attr_int("/", "n_best_size"));
    opt.max_answer_length = static_cast<int>(ref_->attr_int("/", "max_answer_length"));
    return postprocess_qa_predictions(examples_, features, start, end, opt);
  }

  std::string dir_;
  std::unique_ptr<H5Reader> ref_;
  std::vector<SquadExample> examples_;
};

TEST_F(QaOracleTest, ExamplesInReferenceOrder) {
  const auto ids = ref_->read_strings("/example_ids");
  ASSERT_EQ(examples_.size(), 8u);
  ASSERT_EQ(ids.size(), 8u);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(examples_[i].id, ids[i]);
    const std::string g = "/examples/" + ids[i];
    EXPECT_EQ(examples_[i].context, ref_->attr_string(g, "context"));
    EXPECT_EQ(examples_[i].question, ref_->attr_string(g, "question"));
    EXPECT_EQ(python_lstrip(examples_[i].question), ref_->attr_string(g, "question_stripped"));
    EXPECT_EQ(examples_[i].title, ref_->attr_string(g, "title"));
  }
}

TEST_F(QaOracleTest, FeaturesMatchTheReference) {
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_);
  QaFeatureOptions opt;
  opt.max_seq_length = static_cast<int>(ref_->attr_int("/", "max_seq_length"));
  opt.doc_stride = static_cast<int>(ref_->attr_int("/", "doc_stride"));
  const std::vector<QaFeature> ours = make_qa_features(examples_, tok, opt);
  const std::vector<QaFeature> ref = reference_features();
  ASSERT_EQ(ours.size(), 13u);
  ASSERT_EQ(ref.size(), 13u);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    SCOPED_TRACE("feature " + std::to_string(i));
    EXPECT_EQ(ours[i].example_index, ref[i].example_index);
    EXPECT_EQ(ours[i].window, ref[i].window);
    EXPECT_EQ(ours[i].context_token_start, ref[i].context_token_start);
    EXPECT_EQ(ours[i].context_token_stop, ref[i].context_token_stop);
    EXPECT_EQ(ours[i].input_ids, ref[i].input_ids);
    EXPECT_EQ(ours[i].attention_mask, ref[i].attention_mask);
    EXPECT_EQ(ours[i].offsets, ref[i].offsets);
  }
  EXPECT_EQ(std::vector<std::int64_t>(ours[0].input_ids.begin(), ours[0].input_ids.begin() + 8),
            (std::vector<std::int64_t>{0, 2264, 222, 5, 837, 9, 1659, 1219}));
}

TEST_F(QaOracleTest, PostprocessingMatchesUtilsQa) {
  const std::vector<QaFeature> features = reference_features();
  const std::vector<QaPrediction> preds = reference_postprocess(features);
  ASSERT_EQ(preds.size(), examples_.size());
  for (std::size_t e = 0; e < examples_.size(); ++e) {
    const std::string g = "/predictions/" + examples_[e].id;
    SCOPED_TRACE(g);
    EXPECT_EQ(preds[e].text, ref_->attr_string(g, "prediction_text"));
    const auto text = ref_->read_strings(g + "/nbest_text");
    const auto score = ref_->read_f32(g + "/nbest_score");
    const auto start_logit = ref_->read_f32(g + "/nbest_start_logit");
    const auto end_logit = ref_->read_f32(g + "/nbest_end_logit");
    const auto prob = ref_->read_f32(g + "/nbest_probability");
    const auto chars = ref_->read_i64(g + "/nbest_char_offsets");
    const auto feature = ref_->read_i64(g + "/nbest_feature");
    const auto tstart = ref_->read_i64(g + "/nbest_token_start");
    const auto tend = ref_->read_i64(g + "/nbest_token_end");
    const auto& nb = preds[e].nbest;
    ASSERT_EQ(nb.size(), text.size());
    for (std::size_t k = 0; k < nb.size(); ++k) {
      SCOPED_TRACE("n-best " + std::to_string(k));
      EXPECT_EQ(nb[k].text, text[k]);
      EXPECT_NEAR(nb[k].score, score[k], 1e-6);
      EXPECT_EQ(nb[k].start_logit, start_logit[k]);
      EXPECT_EQ(nb[k].end_logit, end_logit[k]);
      EXPECT_EQ(nb[k].probability, prob[k]);  // numpy float32 softmax, bit for bit
      EXPECT_EQ(nb[k].char_start, chars[2 * k]);
      EXPECT_EQ(nb[k].char_end, chars[2 * k + 1]);
      EXPECT_EQ(nb[k].feature, feature[k]);
      EXPECT_EQ(nb[k].token_start, tstart[k]);
      EXPECT_EQ(nb[k].token_end, tend[k]);
    }
  }
}

TEST_F(QaOracleTest, MetricsMatchTheReference) {
  const std::vector<QaPrediction> preds = reference_postprocess(reference_features());
  std::vector<std::string> texts;
  for (const auto& p : preds) texts.push_back(p.text);
  const SquadScores s = evaluate_squad_v1(examples_, texts);
  const auto em = ref_->read_f64("/metrics/exact_match_per_question");
  const auto f1 = ref_->read_f64("/metrics/f1_per_question");
  ASSERT_EQ(s.exact_per_question.size(), em.size());
  // The reference stores the per-question scores x 100.
  for (std::size_t i = 0; i < em.size(); ++i) {
    EXPECT_EQ(100.0 * s.exact_per_question[i], em[i]) << i;
    EXPECT_NEAR(100.0 * s.f1_per_question[i], f1[i], 1e-9) << i;
  }
  EXPECT_NEAR(s.exact, ref_->attr_double("/metrics", "exact_match"), 1e-9);
  EXPECT_NEAR(s.f1, ref_->attr_double("/metrics", "f1"), 1e-9);
  EXPECT_NEAR(s.f1, 5.5060, 5e-5);  // oracle/README.md
}

TEST_F(QaOracleTest, PredictionFilesMatchUtilsQa) {
  const std::vector<QaPrediction> preds = reference_postprocess(reference_features());
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < preds.size(); ++i) {
    pairs.emplace_back(examples_[i].id, preds[i].text);
    ids.push_back(examples_[i].id);
  }
  const auto tmp = testing::make_temp_dir("evalrun-qa-oracle");
  const std::string pred_path = (tmp / "predictions.json").string();
  const std::string nbest_path = (tmp / "nbest_predictions.json").string();
  write_predictions_json(pred_path, pairs);
  write_nbest_predictions_json(nbest_path, ids, preds);
  EXPECT_EQ(slurp(pred_path), slurp(dir_ + "/predictions.json"));

  // nbest: field by field first, for a readable failure.
  using nlohmann::ordered_json;
  const ordered_json ours = ordered_json::parse(slurp(nbest_path));
  const ordered_json theirs = ordered_json::parse(slurp(dir_ + "/nbest_predictions.json"));
  ASSERT_EQ(ours.size(), theirs.size());
  auto it = ours.begin();
  for (auto jt = theirs.begin(); jt != theirs.end(); ++it, ++jt) {
    ASSERT_EQ(it.key(), jt.key());
    ASSERT_EQ(it->size(), jt->size());
    for (std::size_t k = 0; k < jt->size(); ++k) {
      const auto& a = (*it)[k];
      const auto& b = (*jt)[k];
      std::vector<std::string> ka, kb;
      for (auto x = a.begin(); x != a.end(); ++x) ka.push_back(x.key());
      for (auto x = b.begin(); x != b.end(); ++x) kb.push_back(x.key());
      EXPECT_EQ(ka, kb);
      EXPECT_EQ(a["text"], b["text"]);
      EXPECT_EQ(a["start_logit"].get<double>(), b["start_logit"].get<double>());
      EXPECT_EQ(a["end_logit"].get<double>(), b["end_logit"].get<double>());
      EXPECT_EQ(a["probability"].get<double>(), b["probability"].get<double>());
    }
  }
  // Byte for byte, probabilities included (numpy's float32 exp is reproduced).
  EXPECT_EQ(slurp(nbest_path), slurp(dir_ + "/nbest_predictions.json"));
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace evalrun
