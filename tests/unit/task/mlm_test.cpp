// Masked-LM task logic without a model: features from texts, top-k of a logits row, softmax scores,
// filled text and accuracy. Uses the built-in tiny BPE tokenizer, so no shared data is needed.
#include "task/mlm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "common/errors.hpp"
#include "test_util.hpp"
#include "fixtures/tiny_bpe.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

class Mlm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = evalrun::testing::make_temp_dir("evalrun-mlm");
    write_tiny_bpe_tokenizer(dir_.string(), 600);
    tok_ = new ByteLevelBPE(ByteLevelBPE::from_dir(dir_.string()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
    fs::remove_all(dir_);
  }
  static const ByteLevelBPE& tok() { return *tok_; }

  static TextSample sample(const std::string& id, const std::string& text, std::vector<std::string> targets = {}) {
    return TextSample{id, text, std::move(targets)};
  }

  // The message of the InputError that `f` throws ("" when it throws none).
  template <class F>
  static std::string input_error(F&& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  static inline fs::path dir_;
  static inline ByteLevelBPE* tok_ = nullptr;
};

MaskPrediction prediction_of(std::int64_t id, const ByteLevelBPE& t) {
  MaskPrediction p;
  p.token_ids = {id};
  p.scores = {0.5F};
  p.tokens = {t.decode({id})};
  return p;
}

}  // namespace

TEST_F(Mlm, FeaturesWrapTextInBosEosAndFindMasks) {
  const auto& sp = tok().special();
  ASSERT_GE(sp.mask, 0);
  const std::vector<TextSample> samples = {sample("one", "The river is <mask> today."),
                                           sample("two", "<mask> and <mask> went home.", {" Anna", " Bob"})};
  auto features = make_mlm_features(samples, tok(), 64, "data.jsonl");
  ASSERT_EQ(features.size(), 2u);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& f = features[i];
    EXPECT_EQ(f.sample_index, i);
    const auto body = tok().encode(samples[i].text).ids;
    ASSERT_EQ(f.input_ids.size(), body.size() + 2);
    EXPECT_EQ(f.input_ids.front(), sp.bos);
    EXPECT_EQ(f.input_ids.back(), sp.eos);
    EXPECT_TRUE(std::equal(body.begin(), body.end(), f.input_ids.begin() + 1));
    for (auto p : f.mask_positions) EXPECT_EQ(f.input_ids.at(static_cast<std::size_t>(p)), sp.mask);
    EXPECT_EQ(static_cast<std::size_t>(std::count(f.input_ids.begin(), f.input_ids.end(), sp.mask)),
              f.mask_positions.size());
  }
  ASSERT_EQ(features[0].mask_positions.size(), 1u);
  ASSERT_EQ(features[1].mask_positions.size(), 2u);
  EXPECT_EQ(features[1].mask_positions[0], 1);  // right after <s>
  EXPECT_LT(features[1].mask_positions[0], features[1].mask_positions[1]);
  // <mask> takes the space before it (lstrip): "is <mask>" has no separate space token before the mask
  const auto& f0 = features[0];
  const auto before = f0.input_ids.at(static_cast<std::size_t>(f0.mask_positions[0] - 1));
  EXPECT_EQ(tok().decode({before}), " is");
}

TEST_F(Mlm, SampleWithoutMaskIsAnInputErrorNamingIt) {
  const auto msg = input_error([&] {
    make_mlm_features({sample("ok", "a <mask> b"), sample("no-mask-here", "plain text")}, tok(), 64, "set.jsonl");
  });
  EXPECT_NE(msg.find("no-mask-here"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set.jsonl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<mask>"), std::string::npos) << msg;
}

TEST_F(Mlm, SampleLongerThanMaxSeqLengthIsAnInputErrorNamingIt) {
  const auto s = sample("long-one", "one two three four five six seven eight nine ten <mask>");
  const auto n = tok().encode(s.text).ids.size() + 2;
  EXPECT_NO_THROW(make_mlm_features({s}, tok(), static_cast<int>(n), "set.jsonl"));  // exactly fits
  const auto msg = input_error([&] { make_mlm_features({s}, tok(), static_cast<int>(n) - 1, "set.jsonl"); });
  EXPECT_NE(msg.find("long-one"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_seq_length"), std::string::npos) << msg;
}

TEST_F(Mlm, TargetCountMustMatchMaskCount) {
  const auto msg = input_error(
      [&] { make_mlm_features({sample("two-masks", "<mask> and <mask>", {" a"})}, tok(), 64, "set.jsonl"); });
  EXPECT_NE(msg.find("two-masks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 targets"), std::string::npos) << msg;
  EXPECT_NO_THROW(make_mlm_features({sample("two", "<mask> and <mask>", {" a", " b"})}, tok(), 64, "set.jsonl"));
  EXPECT_NO_THROW(make_mlm_features({sample("none", "<mask> and <mask>")}, tok(), 64, "set.jsonl"));
}

TEST(MlmTopK, BestFirstTiesByLowerIdAndLogSumExp) {
  const std::vector<float> row = {1.0F, 3.0F, -2.0F, 3.0F, 0.5F, 2.0F};
  auto t = top_k_of_row(row.data(), static_cast<std::int64_t>(row.size()), 4);
  EXPECT_EQ(t.ids, (std::vector<std::int64_t>{1, 3, 5, 0}));
  EXPECT_EQ(t.logits, (std::vector<float>{3.0F, 3.0F, 2.0F, 1.0F}));
  double direct = 0;
  for (float x : row) direct += std::exp(static_cast<double>(x));
  EXPECT_NEAR(t.logsumexp, std::log(direct), 1e-12);
  // k larger than the row: the whole row, sorted
  auto all = top_k_of_row(row.data(), static_cast<std::int64_t>(row.size()), 50);
  EXPECT_EQ(all.ids, (std::vector<std::int64_t>{1, 3, 5, 0, 4, 2}));
}

TEST(MlmTopK, LogSumExpIsStableForLargeLogits) {
  // exp(1000) overflows a double: the max must be factored out
  const std::vector<float> row = {1000.0F, 999.0F, 998.0F};
  auto t = top_k_of_row(row.data(), 3, 1);
  const double expect = 1000.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  EXPECT_TRUE(std::isfinite(t.logsumexp));
  EXPECT_NEAR(t.logsumexp, expect, 1e-9);
  EXPECT_EQ(t.ids, (std::vector<std::int64_t>{0}));
}

TEST_F(Mlm, PredictMaskScoresAreSoftmaxOverTheWholeRow) {
  const auto v = tok().vocab_size();
  std::vector<float> row(static_cast<std::size_t>(v));
  for (std::int64_t i = 0; i < v; ++i) row[static_cast<std::size_t>(i)] = std::sin(0.37F * static_cast<float>(i)) * 4.0F;
  auto t = top_k_of_row(row.data(), v, 8);
  auto p = predict_mask(t, 5, tok());
  ASSERT_EQ(p.token_ids.size(), 5u);
  ASSERT_EQ(p.scores.size(), 5u);
  ASSERT_EQ(p.tokens.size(), 5u);
  double z = 0;
  for (float x : row) z += std::exp(static_cast<double>(x));
  double sum = 0;
  for (std::size_t j = 0; j < 5; ++j) {
    EXPECT_EQ(p.token_ids[j], t.ids[j]);
    const double expect = std::exp(static_cast<double>(row[static_cast<std::size_t>(p.token_ids[j])])) / z;
    EXPECT_NEAR(p.scores[j], expect, 1e-6);
    EXPECT_EQ(p.tokens[j], tok().decode({p.token_ids[j]}));
    if (j > 0) {
      EXPECT_GE(p.scores[j - 1], p.scores[j]);
    }
    sum += p.scores[j];
  }
  EXPECT_LE(sum, 1.0 + 1e-6);
  EXPECT_GT(sum, 0.0);
  // top_k larger than what was kept: only the kept ids
  EXPECT_EQ(predict_mask(t, 20, tok()).token_ids.size(), 8u);
}

TEST_F(Mlm, FillMasksReplacesEveryMaskWithItsTopOneAndDropsSpecials) {
  auto f = make_mlm_features({sample("s", "The <mask> is near the <mask>.")}, tok(), 64, "set.jsonl");
  ASSERT_EQ(f[0].mask_positions.size(), 2u);
  const auto river = tok().encode(" river").ids;
  const auto sea = tok().encode("x").ids;
  ASSERT_EQ(river.size(), 1u) << "the tiny vocabulary should hold ' river' as one token";
  ASSERT_EQ(sea.size(), 1u);
  // <mask> took the space before it, so a token without a leading space joins the previous word,
  // exactly as Hugging Face decodes the filled ids
  EXPECT_EQ(fill_masks(f[0], {prediction_of(river[0], tok()), prediction_of(sea[0], tok())}, tok()),
            "The river is near thex.");
}

TEST_F(Mlm, FillMasksKeepsTextAroundNonAsciiCharacters) {
  auto f = make_mlm_features({sample("s", "Caf\xc3\xa9 <mask> \xe2\x80\x94 ok")}, tok(), 64, "set.jsonl");
  const auto word = tok().encode(" river").ids;
  EXPECT_EQ(fill_masks(f[0], {prediction_of(word[0], tok())}, tok()), "Caf\xc3\xa9 river \xe2\x80\x94 ok");
}

TEST_F(Mlm, PredictionIsCorrectWhenStrippedTextsAreEqual) {
  const auto id = tok().encode(" river").ids.at(0);
  const auto p = prediction_of(id, tok());
  ASSERT_EQ(p.tokens[0], " river");
  EXPECT_TRUE(mask_prediction_correct(p, "river"));
  EXPECT_TRUE(mask_prediction_correct(p, " river "));
  EXPECT_FALSE(mask_prediction_correct(p, "River"));
  EXPECT_FALSE(mask_prediction_correct(p, "rive"));
  EXPECT_FALSE(mask_prediction_correct(MaskPrediction{}, "river"));
}
