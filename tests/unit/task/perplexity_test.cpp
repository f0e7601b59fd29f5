// task/perplexity: the Hugging Face sliding-window recipe (window bookkeeping), the scores against a
// naive teacher-forced recomputation on a tiny random Llama, batching, and stories260K on a piece of
// WikiText-2 (shared data).
#include "task/perplexity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/errors.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "test_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

TEST(PerplexityWindows, FollowTheHuggingFaceRecipe) {
  // n = 10, context 4, stride 4: [0,4) scores 1..3, [4,8) scores 5..7, [8,10) scores 9.
  auto w = make_perplexity_windows(10, 4, 0);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 4);
  EXPECT_EQ(w[0].score_from, 1);
  EXPECT_EQ(w[1].begin, 4);
  EXPECT_EQ(w[1].score_from, 5);
  EXPECT_EQ(w[2].begin, 8);
  EXPECT_EQ(w[2].end, 10);
  EXPECT_EQ(w[2].score_from, 9);
  EXPECT_EQ(w[2].index, 2u);
  // Stride 2: windows [0,4) [2,6) [4,8) [6,10); trg_len 4, 2, 2, 2; the loop ends once end == n.
  w = make_perplexity_windows(10, 4, 2);
  ASSERT_EQ(w.size(), 4u);
  const std::int64_t from[] = {1, 4, 6, 8};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].begin, 2 * i);
    EXPECT_EQ(w[i].end, 2 * i + 4);
    EXPECT_EQ(w[i].score_from, from[i]);
  }
  // Every position 1..n-1 scored exactly once with stride < context.
  w = make_perplexity_windows(37, 8, 3);
  std::vector<int> count(37, 0);
  for (const auto& x : w) {
    for (auto p = x.score_from; p < x.end; ++p) ++count[p];
  }
  EXPECT_EQ(count[0], 0);
  for (int p = 1; p < 37; ++p) EXPECT_EQ(count[p], 1) << p;
  // A 1-token last window scores nothing.
  w = make_perplexity_windows(9, 4, 4);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[2].begin, 8);
  EXPECT_EQ(w[2].score_from, w[2].end);

  EXPECT_THROW(make_perplexity_windows(10, 1, 1), InputError);
  EXPECT_THROW(make_perplexity_windows(10, 4, 5), InputError);
  EXPECT_THROW(make_perplexity_windows(10, 4, -1), InputError);
  EXPECT_THROW(make_perplexity_windows(1, 4, 4), InputError);
}

TEST(PerplexitySummary, MeanNllPerplexityAndStandardError) {
  const std::vector<double> lp = {std::log(0.5), std::log(0.25), std::log(0.125)};
  const auto s = summarize_perplexity(lp);
  EXPECT_EQ(s.n_scored, 3);
  const double nll[] = {std::log(2.0), std::log(4.0), std::log(8.0)};
  const double mean = (nll[0] + nll[1] + nll[2]) / 3;
  EXPECT_NEAR(s.mean_nll, mean, 1e-12);
  EXPECT_NEAR(s.perplexity, 4.0, 1e-12);
  double var = 0;
  for (double x : nll) var += (x - mean) * (x - mean);
  EXPECT_NEAR(s.perplexity_stderr, 4.0 * std::sqrt(var / 2) / std::sqrt(3.0), 1e-12);
  EXPECT_EQ(summarize_perplexity({}).n_scored, 0);
}

class TinyLlamaPerplexity : public ::testing::Test {
 protected:
  static constexpr std::int64_t kVocab = 300;
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::make_temp_dir("evalrun-ppl"));
    make_llama_checkpoint(dir_->string(), "tiny-llama", 3, kVocab);
    model_ = LlamaModel::load({dir_->string(), DType::fp32, "cpu"}).release();
    std::mt19937 rng(9);
    std::uniform_int_distribution<std::int64_t> id(3, kVocab - 1);
    tokens_ = new Ids{1};
    for (int i = 0; i < 70; ++i) tokens_->push_back(id(rng));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokens_;
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (dir_ == nullptr) return;
    fs::remove_all(*dir_);
    delete dir_;
  }

  // Teacher forcing, one window at a time, straight from the recipe: feed tokens[begin:end], score
  // the labels of the last trg_len positions that have a prediction. Returns {position -> log p}.
  static std::vector<std::pair<std::int64_t, double>> naive(int context, int stride) {
    std::vector<std::pair<std::int64_t, double>> out;
    const auto n = static_cast<std::int64_t>(tokens_->size());
    std::int64_t prev_end = 0;
    std::vector<float> logits;
    for (std::int64_t begin = 0; begin < n; begin += stride) {
      const std::int64_t end = std::min<std::int64_t>(begin + context, n);
      const std::int64_t trg_len = end - prev_end;
      const std::int64_t len = end - begin;
      Ids ids(tokens_->begin() + begin, tokens_->begin() + end), pos(len), mask(len, 1);
      for (std::int64_t k = 0; k < len; ++k) pos[k] = k;
      auto cache = model_->new_cache(1, len);
      model_->forward(ids.data(), pos.data(), mask.data(), 1, len, *cache, true, logits);
      for (std::int64_t k = 1; k < len; ++k) {  // label k predicted at k - 1
        if (k < len - trg_len) continue;        // labels masked with -100
        const float* row = logits.data() + (k - 1) * kVocab;
        double mx = row[0], sum = 0;
        for (std::int64_t v = 0; v < kVocab; ++v) mx = std::max<double>(mx, row[v]);
        for (std::int64_t v = 0; v < kVocab; ++v) sum += std::exp(row[v] - mx);
        out.emplace_back(begin + k, row[ids[k]] - mx - std::log(sum));
      }
      prev_end = end;
      if (end == n) break;
    }
    return out;
  }

  static void expect_matches_naive(int context, int stride, int batch) {
    PerplexityOptions o;
    o.context_length = context;
    o.stride = stride;
    o.batch_size = batch;
    const auto r = run_perplexity(*model_, *tokens_, o);
    const auto ref = naive(context, stride == 0 ? context : stride);
    std::vector<std::pair<std::int64_t, double>> got;
    for (const auto& s : r.scores) {
      ASSERT_EQ(s.positions.size(), s.log_probs.size());
      for (std::size_t i = 0; i < s.positions.size(); ++i) got.emplace_back(s.positions[i], s.log_probs[i]);
    }
    ASSERT_EQ(got.size(), ref.size()) << context << "/" << stride << "/" << batch;
    std::vector<double> lp;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, ref[i].first);
      EXPECT_NEAR(got[i].second, ref[i].second, 1e-5) << "position " << got[i].first;
      lp.push_back(ref[i].second);
    }
    const auto expect = summarize_perplexity(lp);
    EXPECT_EQ(r.summary.n_scored, static_cast<std::int64_t>(ref.size()));
    EXPECT_NEAR(r.summary.mean_nll, expect.mean_nll, 1e-6);
    EXPECT_NEAR(r.summary.perplexity, std::exp(r.summary.mean_nll), 1e-9);
    EXPECT_GT(r.summary.perplexity, 1.0);
  }

  static fs::path* dir_;
  static LlamaModel* model_;
  static Ids* tokens_;
};
fs::path* TinyLlamaPerplexity::dir_ = nullptr;
LlamaModel* TinyLlamaPerplexity::model_ = nullptr;
Ids* TinyLlamaPerplexity::tokens_ = nullptr;

TEST_F(TinyLlamaPerplexity, NonOverlappingWindowsMatchNaive) {
  expect_matches_naive(16, 0, 1);  // 71 tokens: 4 windows of 16 and one of 7
  // Non-overlapping: n - number of windows tokens are scored.
  PerplexityOptions o;
  o.context_length = 16;
  const auto r = run_perplexity(*model_, *tokens_, o);
  EXPECT_EQ(r.windows.size(), 5u);
  EXPECT_EQ(r.summary.n_scored, 71 - 5);
}

TEST_F(TinyLlamaPerplexity, StridedWindowsMatchNaiveAndScoreEveryTokenOnce) {
  expect_matches_naive(16, 5, 1);
  PerplexityOptions o;
  o.context_length = 16;
  o.stride = 5;
  const auto r = run_perplexity(*model_, *tokens_, o);
  EXPECT_EQ(r.summary.n_scored, 70);
  // A longer context sees more: the strided result differs from the non-overlapping one.
  o.stride = 16;
  const auto plain = run_perplexity(*model_, *tokens_, o);
  EXPECT_NE(r.summary.mean_nll, plain.summary.mean_nll);
}

TEST_F(TinyLlamaPerplexity, BatchingAndKeptLogitsAgree) {
  expect_matches_naive(16, 5, 4);
  expect_matches_naive(16, 0, 3);
  PerplexityOptions o;
  o.context_length = 12;
  o.stride = 4;
  o.batch_size = 1;
  o.keep_logits = -1;
  const auto full = run_perplexity(*model_, *tokens_, o);
  o.batch_size = 5;
  o.keep_logits = 3;
  const auto top = run_perplexity(*model_, *tokens_, o);
  ASSERT_EQ(full.scores.size(), top.scores.size());
  for (std::size_t w = 0; w < full.scores.size(); ++w) {
    const auto& f = full.scores[w];
    const auto& t = top.scores[w];
    ASSERT_EQ(f.logits.size(), f.positions.size() * kVocab);
    ASSERT_EQ(t.topk_ids.size(), t.positions.size() * 3);
    for (std::size_t i = 0; i < f.positions.size(); ++i) {
      const float* row = f.logits.data() + i * kVocab;
      const auto best = std::max_element(row, row + kVocab) - row;
      EXPECT_EQ(t.topk_ids[3 * i], best);
      EXPECT_NEAR(t.topk_logits[3 * i], row[best], 1e-5);
      EXPECT_NEAR(t.log_probs[i], f.log_probs[i], 1e-5);
    }
  }
}

// The per-batch report (what the run journal records): every window exactly once, a 1-token last
// window too, each with its final scores.
TEST_F(TinyLlamaPerplexity, BatchDoneReportsEveryWindowOnceWithItsFinalScores) {
  // 71 tokens, windows of 10 with stride 10: the last window holds one token and scores nothing.
  const auto windows = make_perplexity_windows(static_cast<std::int64_t>(tokens_->size()), 10, 10);
  ASSERT_EQ(windows.back().end - windows.back().begin, 1);
  PerplexityOptions o;
  o.context_length = 10;
  o.batch_size = 3;
  o.keep_logits = 2;
  std::vector<int> reported(windows.size(), 0);
  std::vector<WindowScores> seen(windows.size());
  const auto out = score_perplexity_windows(*model_, *tokens_, windows, o,
                                            [&](const std::vector<WindowScores>& s, const std::vector<std::size_t>& done) {
                                              for (std::size_t i : done) {
                                                ++reported[i];
                                                seen[i] = s[i];
                                              }
                                            });
  for (std::size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(reported[i], 1) << i;
    EXPECT_EQ(seen[i].index, windows[i].index);
    EXPECT_EQ(seen[i].positions, out[i].positions) << i;
    EXPECT_EQ(seen[i].log_probs, out[i].log_probs) << i;
    EXPECT_EQ(seen[i].topk_ids, out[i].topk_ids) << i;
  }
  EXPECT_TRUE(seen.back().positions.empty());
  EXPECT_FALSE(seen.front().positions.empty());
}

TEST(PerplexityStories, WikiTextPieceIsFiniteAndAboveOne) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/models/stories260K";
  auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
  const auto tok = DecoderTokenizer::from_dir(dir);
  std::ifstream in(data + "/wikitext-2/wiki.test.txt", std::ios::binary);
  ASSERT_TRUE(in);
  std::string text(6000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  text.resize(text.rfind('\n') + 1);  // whole lines, no cut UTF-8 character
  const Ids tokens = tok.encode(text);
  ASSERT_GT(tokens.size(), 300u);
  EXPECT_EQ(tokens.front(), 1);
  PerplexityOptions o;
  o.context_length = 128;
  o.stride = 64;
  o.batch_size = 4;
  const auto r = run_perplexity(*model, tokens, o);
  EXPECT_EQ(r.summary.n_scored, static_cast<std::int64_t>(tokens.size()) - 1);
  EXPECT_TRUE(std::isfinite(r.summary.perplexity));
  EXPECT_GT(r.summary.perplexity, 1.0);
  EXPECT_GT(r.summary.perplexity_stderr, 0.0);
  EXPECT_LT(r.summary.perplexity_stderr, r.summary.perplexity);
  // A model trained on children's stories finds Wikipedia much harder than its own kind of text.
  const Ids story = tok.encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw a big, red ball.");
  o.context_length = 64;
  o.stride = 0;
  const auto s = run_perplexity(*model, story, o);
  EXPECT_LT(s.summary.perplexity, r.summary.perplexity);
}

}  // namespace
}  // namespace evalrun
