// task/qa_postprocess on hand-made features: n-best order, ties, length limits, SQuAD v2 null answer,
// the "empty" fallback, probabilities.
#include <cmath>
#include <numeric>

#include "task/qa_postprocess.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

// "Köln is on the Rhine": tokens Köln [0,4) is [5,7) on [8,10) the [11,14) Rhine [15,20) (code points).
const std::string kContext = "K\u00f6ln is on the Rhine";

// <s> q </s> </s> Köln is on the Rhine </s>: context at positions 4..8.
QaFeature make_feature() {
  QaFeature f;
  f.input_ids = {0, 100, 2, 2, 11, 12, 13, 14, 15, 2};
  f.attention_mask.assign(10, 1);
  f.offsets = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {0, 4}, {5, 7}, {8, 10}, {11, 14}, {15, 20}, {-1, -1}};
  f.context_token_start = 0;
  f.context_token_stop = 5;
  return f;
}

// Context start logits [1, 0, 0, 2, 3], end logits [0, 0, 1, 0, 4]; the special tokens score high so they
// are among the top positions but never form a span.
const std::vector<float> kStart = {5, 9, 0, 0, 1, 0, 0, 2, 3, 8};
const std::vector<float> kEnd = {5, 9, 0, 0, 0, 0, 1, 0, 4, 8};

std::vector<std::string> texts(const QaPrediction& p) {
  std::vector<std::string> t;
  for (const auto& c : p.nbest) t.push_back(c.text);
  return t;
}

TEST(QaPostprocess, NBestOrderTextsAndPositions) {
  const QaFeature f = make_feature();
  const QaPrediction p = postprocess_qa_example(kContext, {{&f, 7, kStart, kEnd}}, QaPostprocessOptions{});
  EXPECT_EQ(p.text, "Rhine");
  // Scores 7, 6, 5, 4, 4, 2, 2, 1 x5, 0 x3. Equal scores keep the order in which the pairs were generated:
  // start positions by logit (ties: higher position first), then end positions likewise.
  const std::vector<std::string> expect = {"Rhine", "the Rhine", "K\u00f6ln is on the Rhine", "on the Rhine",
                                           "is on the Rhine", "the", "K\u00f6ln is on", "K\u00f6ln is on the",
                                           "K\u00f6ln is", "K\u00f6ln", "on", "is on", "on the", "is on the", "is"};
  EXPECT_EQ(texts(p), expect);
  const std::vector<float> scores = {7, 6, 5, 4, 4, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0};
  ASSERT_EQ(p.nbest.size(), scores.size());
  for (std::size_t i = 0; i < scores.size(); ++i) EXPECT_EQ(p.nbest[i].score, scores[i]) << i;
  const QaCandidate& top = p.nbest[0];
  EXPECT_EQ(top.feature, 7);
  EXPECT_EQ(top.token_start, 8);
  EXPECT_EQ(top.token_end, 8);
  EXPECT_EQ(top.char_start, 15);
  EXPECT_EQ(top.char_end, 20);
  EXPECT_EQ(top.start_logit, 3.0F);
  EXPECT_EQ(top.end_logit, 4.0F);
  const QaCandidate& whole = p.nbest[2];
  EXPECT_EQ(whole.token_start, 4);
  EXPECT_EQ(whole.token_end, 8);
  EXPECT_EQ(whole.char_start, 0);
  // Softmax over the kept scores.
  double denom = 0;
  for (float s : scores) denom += std::exp(static_cast<double>(s) - 7.0);
  for (std::size_t i = 0; i < scores.size(); ++i) {
    EXPECT_NEAR(p.nbest[i].probability, std::exp(scores[i] - 7.0) / denom, 1e-6) << i;  // float32 softmax
  }
}

TEST(QaPostprocess, LimitsNBestSizeAndAnswerLength) {
  const QaFeature f = make_feature();
  QaPostprocessOptions opt;
  opt.max_answer_length = 2;
  QaPrediction p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  EXPECT_EQ(texts(p), (std::vector<std::string>{"Rhine", "the Rhine", "the", "K\u00f6ln is", "K\u00f6ln", "on",
                                                "is on", "on the", "is"}));
  opt.n_best_size = 3;
  opt.max_answer_length = 30;
  p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  // Only the top 3 start and end positions are paired: starts {1, 9, 0}, ends {1, 9, 0} are all outside
  // the context, so nothing is left and utils_qa's "empty" fallback appears.
  ASSERT_EQ(p.nbest.size(), 1u);
  EXPECT_EQ(p.text, "empty");
  EXPECT_EQ(p.nbest[0].kind, QaCandidate::Kind::empty_fallback);
  EXPECT_EQ(p.nbest[0].probability, 1.0F);
  EXPECT_EQ(p.nbest[0].score, 0.0F);
}

TEST(QaPostprocess, PaddedLogitsBeyondTheFeatureAreIgnored) {
  const QaFeature f = make_feature();
  std::vector<float> s = kStart, e = kEnd;
  s.insert(s.end(), {100, 100});
  e.insert(e.end(), {100, 100});
  const QaPrediction p = postprocess_qa_example(kContext, {{&f, 0, s, e}}, QaPostprocessOptions{});
  EXPECT_EQ(p.text, "Rhine");
  EXPECT_EQ(p.nbest.size(), 15u);
}

TEST(QaPostprocess, EqualScoresAcrossWindowsKeepWindowOrder) {
  const QaFeature f = make_feature();
  QaFeature g = make_feature();
  const QaPrediction p = postprocess_qa_example(kContext, {{&f, 3, kStart, kEnd}, {&g, 4, kStart, kEnd}}, QaPostprocessOptions{});
  ASSERT_EQ(p.nbest.size(), 20u);
  EXPECT_EQ(p.nbest[0].text, "Rhine");
  EXPECT_EQ(p.nbest[0].feature, 3);
  EXPECT_EQ(p.nbest[1].text, "Rhine");
  EXPECT_EQ(p.nbest[1].feature, 4);
  EXPECT_EQ(p.nbest[2].text, "the Rhine");
  EXPECT_EQ(p.nbest[2].feature, 3);
}

TEST(QaPostprocess, V2NullAnswerWinsUnlessThresholdAllows) {
  const QaFeature f = make_feature();
  QaPostprocessOptions opt;
  opt.version_2_with_negative = true;
  // null score = 5 + 5 = 10 > best span 7: no answer.
  QaPrediction p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  EXPECT_EQ(p.text, "");
  EXPECT_EQ(p.null_score_diff, 3.0F);
  ASSERT_EQ(p.nbest.size(), 16u);
  EXPECT_EQ(p.nbest[0].text, "");
  EXPECT_EQ(p.nbest[0].kind, QaCandidate::Kind::null_answer);
  EXPECT_EQ(p.nbest[0].score, 10.0F);
  EXPECT_EQ(p.nbest[0].token_start, 0);
  EXPECT_EQ(p.nbest[1].text, "Rhine");
  opt.null_score_diff_threshold = 3.5F;
  p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  EXPECT_EQ(p.text, "Rhine");
  opt.null_score_diff_threshold = 3.0F;  // the diff must exceed the threshold
  p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  EXPECT_EQ(p.text, "Rhine");
}

TEST(QaPostprocess, V2NullAnswerIsAddedBackAndTakenFromTheLowestFeature) {
  const QaFeature f = make_feature();
  std::vector<float> s1 = kStart, e1 = kEnd, s2 = kStart, e2 = kEnd;
  s1[0] = -5;
  e1[0] = -4;  // null -9
  s2[0] = -6;
  e2[0] = -6;  // null -12: the minimum
  QaPostprocessOptions opt;
  opt.version_2_with_negative = true;
  opt.n_best_size = 5;
  const QaPrediction p = postprocess_qa_example(kContext, {{&f, 0, s1, e1}, {&f, 1, s2, e2}}, opt);
  EXPECT_EQ(p.text, "Rhine");
  EXPECT_EQ(p.null_score_diff, -12.0F - 3.0F - 4.0F);
  ASSERT_EQ(p.nbest.size(), 6u);  // 5 best + the null answer put back at the end
  const QaCandidate& null_answer = p.nbest.back();
  EXPECT_EQ(null_answer.text, "");
  EXPECT_EQ(null_answer.score, -12.0F);
  EXPECT_EQ(null_answer.start_logit, -6.0F);
  EXPECT_EQ(null_answer.feature, 1);
  float total = 0;
  for (const auto& c : p.nbest) total += c.probability;
  EXPECT_NEAR(total, 1.0F, 1e-6);
}

TEST(QaPostprocess, V2EmptyFallbackNextToTheNullAnswer) {
  const QaFeature f = make_feature();
  QaPostprocessOptions opt;
  opt.version_2_with_negative = true;
  opt.n_best_size = 3;  // no context position among the top 3
  const QaPrediction p = postprocess_qa_example(kContext, {{&f, 0, kStart, kEnd}}, opt);
  ASSERT_EQ(p.nbest.size(), 2u);
  EXPECT_EQ(p.nbest[0].text, "empty");
  EXPECT_EQ(p.nbest[1].text, "");
  EXPECT_EQ(p.null_score_diff, 10.0F);  // against the fallback's zero logits
  EXPECT_EQ(p.text, "");
  // softmax([0, 10]) in float64
  EXPECT_NEAR(p.nbest[0].probability, 1.0 / (1.0 + std::exp(10.0)), 1e-9);
}

TEST(QaPostprocess, AllExamplesAtOnce) {
  SquadExample a, b;
  a.id = "a";
  a.context = kContext;
  b.id = "b";
  b.context = kContext;
  std::vector<QaFeature> features = {make_feature(), make_feature(), make_feature()};
  features[0].example_index = 0;
  features[1].example_index = 1;
  features[2].example_index = 1;
  std::vector<float> s2 = kStart;
  s2[5] = 20;  // "is" starts the best span in the third feature
  const auto preds = postprocess_qa_predictions({a, b}, features, {kStart, kStart, s2}, {kEnd, kEnd, kEnd}, {});
  ASSERT_EQ(preds.size(), 2u);
  EXPECT_EQ(preds[0].text, "Rhine");
  EXPECT_EQ(preds[1].text, "is on the Rhine");
  EXPECT_EQ(preds[1].nbest[0].feature, 2);
  EXPECT_THROW(postprocess_qa_predictions({a, b}, features, {kStart}, {kEnd}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace evalrun
