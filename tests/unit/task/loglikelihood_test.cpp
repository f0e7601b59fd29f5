// task/loglikelihood: lm-evaluation-harness's _encode_pair split and token slicing, left truncation,
// and the scores on a tiny random Llama against a naive full forward per request with a hand
// log_softmax in double (batch sizes 1 and 5), is_greedy on the model's own greedy continuation;
// with EVALRUN_DATA_DIR, against the logits Hugging Face transformers computed (oracle fixtures).
#include "task/loglikelihood.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "io/hdf5_file.hpp"
#include "model/llama.hpp"
#include "model/registry.hpp"
#include "test_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

TEST(LoglikSplit, TrailingWhitespaceOfTheContextMovesToTheContinuation) {
  auto p = move_trailing_whitespace("The cat ", "sat");
  EXPECT_EQ(p.context, "The cat");
  EXPECT_EQ(p.continuation, " sat");
  p = move_trailing_whitespace("a \t\n", "b");
  EXPECT_EQ(p.context, "a");
  EXPECT_EQ(p.continuation, " \t\nb");
  p = move_trailing_whitespace("no space", " word");
  EXPECT_EQ(p.context, "no space");
  EXPECT_EQ(p.continuation, " word");
  p = move_trailing_whitespace("  ", "x");  // all spaces: the context becomes empty text
  EXPECT_EQ(p.context, "");
  EXPECT_EQ(p.continuation, "  x");
  p = move_trailing_whitespace(" lead", "");  // leading whitespace stays
  EXPECT_EQ(p.context, " lead");
  EXPECT_EQ(p.continuation, "");
}

TEST(LoglikRequest, LeftTruncatesToMaxLengthAndDropsTheLastToken) {
  LoglikTokens t;
  for (std::int64_t i = 0; i < 10; ++i) t.context.push_back(100 + i);
  t.continuation = {7, 8, 9};
  auto q = make_loglik_request(4, t, 64, "f:1");
  EXPECT_EQ(q.index, 4u);
  EXPECT_EQ(q.truncated, 0);
  ASSERT_EQ(q.input.size(), 12u);  // 13 tokens, the last is only predicted
  EXPECT_EQ(q.input.front(), 100);
  EXPECT_EQ(q.input.back(), 8);
  EXPECT_EQ(q.target, (Ids{7, 8, 9}));
  // max_length 8: the last 9 tokens are kept, 8 fed
  q = make_loglik_request(0, t, 8, "f:1");
  EXPECT_EQ(q.truncated, 4);
  EXPECT_EQ(q.input, (Ids{104, 105, 106, 107, 108, 109, 7, 8}));
  // the continuation alone fills the model: one context token is left
  q = make_loglik_request(0, t, 3, "f:1");
  EXPECT_EQ(q.input, (Ids{109, 7, 8}));
  try {
    make_loglik_request(0, t, 2, "data.jsonl:7");
    FAIL() << "a continuation longer than max_length must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("data.jsonl:7"), std::string::npos) << e.what();
  }
  t.continuation.clear();
  EXPECT_THROW(make_loglik_request(0, t, 64, "f:1"), InputError);
}

TEST(LoglikScore, LogSoftmaxAndArgmaxOfOneRow) {
  const std::vector<float> row = {1.0F, 3.0F, 3.0F, -2.0F};
  double z = 0;
  for (float v : row) z += std::exp(static_cast<double>(v));
  const auto s = score_token(row.data(), 4, 0);
  EXPECT_NEAR(s.log_prob, 1.0 - std::log(z), 1e-12);
  EXPECT_FALSE(s.is_argmax);
  EXPECT_TRUE(score_token(row.data(), 4, 1).is_argmax);   // a tie goes to the lower id, as torch.argmax
  EXPECT_FALSE(score_token(row.data(), 4, 2).is_argmax);
}

class TinyLlamaLoglik : public ::testing::Test {
 protected:
  static constexpr std::int64_t kVocab = 400;  // the tiny BPE tokenizer's size
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::make_temp_dir("evalrun-loglik"));
    make_llama_checkpoint(dir_->string(), "tiny-llama", 7, kVocab);
    write_tiny_bpe_tokenizer(dir_->string(), static_cast<int>(kVocab));
    model_ = LlamaModel::load({dir_->string(), DType::fp32, "cpu"}).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    // Null when SetUpTestSuite failed before making it (a full disk): GoogleTest then skipped the
    // tests and reported that failure.
    if (dir_ == nullptr) return;
    fs::remove_all(*dir_);
    delete dir_;
  }

  // The model's logits rows [len, vocab] for `ids`: one unpadded forward of the whole sequence.
  static std::vector<float> full_forward(const Ids& ids) {
    const auto len = static_cast<std::int64_t>(ids.size());
    Ids pos(ids.size()), mask(ids.size(), 1);
    for (std::int64_t k = 0; k < len; ++k) pos[k] = k;
    auto cache = model_->new_cache(1, len);
    std::vector<float> logits;
    model_->forward(ids.data(), pos.data(), mask.data(), 1, len, *cache, true, logits);
    return logits;
  }

  // Independent of the task code: forward context + continuation, sum log_softmax in double over the
  // rows that predict the continuation, greedy when each is that row's first maximum.
  static std::pair<double, bool> naive(const LoglikTokens& t) {
    Ids all = t.context;
    all.insert(all.end(), t.continuation.begin(), t.continuation.end());
    const auto logits = full_forward(all);
    double ll = 0;
    bool greedy = true;
    for (std::size_t k = t.context.size(); k < all.size(); ++k) {
      const float* row = logits.data() + static_cast<std::int64_t>(k - 1) * kVocab;
      double mx = row[0], sum = 0;
      std::int64_t best = 0;
      for (std::int64_t v = 1; v < kVocab; ++v)
        if (row[v] > row[best]) best = v;
      mx = row[best];
      for (std::int64_t v = 0; v < kVocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      ll += static_cast<double>(row[all[k]]) - mx - std::log(sum);
      greedy = greedy && best == all[k];
    }
    return {ll, greedy};
  }

  static Ids greedy_continuation(const Ids& context, int steps) {
    Ids seq = context, out;
    for (int s = 0; s < steps; ++s) {
      const auto logits = full_forward(seq);
      const float* row = logits.data() + static_cast<std::int64_t>(seq.size() - 1) * kVocab;
      std::int64_t best = 0;
      for (std::int64_t v = 1; v < kVocab; ++v)
        if (row[v] > row[best]) best = v;
      seq.push_back(best);
      out.push_back(best);
    }
    return out;
  }

  static inline fs::path* dir_ = nullptr;
  static inline LlamaModel* model_ = nullptr;
};

TEST_F(TinyLlamaLoglik, EncodePairSlicesTheWholeEncodingAfterTheContext) {
  const auto tok = DecoderTokenizer::from_dir(dir_->string());
  const Encode enc = [&](std::string_view s) { return tok.encode(s); };
  const Encode plain = [&](std::string_view s) { return tok.encode_without_bos(s); };
  const auto t = encode_loglik_pair("the cat sat on the ", "mat", enc, plain, tok.bos_id());
  EXPECT_EQ(t.context, tok.encode("the cat sat on the"));  // the space went to the continuation
  Ids whole = t.context;
  whole.insert(whole.end(), t.continuation.begin(), t.continuation.end());
  EXPECT_EQ(whole, tok.encode("the cat sat on the mat"));
  EXPECT_FALSE(t.continuation.empty());
  EXPECT_EQ(tok.decode(t.continuation), " mat");
  // An empty context is the prefix token; the continuation then has no BOS of its own.
  const auto e = encode_loglik_pair("", "the dog", enc, plain, 1);
  EXPECT_EQ(e.context, (Ids{1}));
  EXPECT_EQ(e.continuation, tok.encode_without_bos("the dog"));
}

TEST_F(TinyLlamaLoglik, ScoresMatchANaiveForwardPerRequestForAnyBatchSize) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<std::int64_t> id(3, kVocab - 1);
  std::uniform_int_distribution<int> len(1, 14);
  std::vector<LoglikTokens> tokens;
  std::vector<LoglikRequest> requests;
  for (std::uint64_t i = 0; i < 11; ++i) {
    LoglikTokens t;
    t.context = {1};
    for (int k = len(rng); k > 0; --k) t.context.push_back(id(rng));
    for (int k = 1 + len(rng) % 6; k > 0; --k) t.continuation.push_back(id(rng));
    requests.push_back(make_loglik_request(100 + i, t, 64, "test"));
    tokens.push_back(t);
  }
  std::vector<LoglikScore> by_one;
  for (int batch : {1, 5}) {
    LoglikOptions o;
    o.batch_size = batch;
    o.pad_id = 0;
    const auto got = score_loglik_requests(*model_, requests, o);
    ASSERT_EQ(got.size(), requests.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto [ll, greedy] = naive(tokens[i]);
      EXPECT_EQ(got[i].index, 100 + i);
      EXPECT_EQ(got[i].num_tokens, static_cast<std::int64_t>(tokens[i].continuation.size()));
      EXPECT_NEAR(got[i].loglikelihood, ll, 1e-4) << "request " << i << ", batch " << batch;
      EXPECT_LT(got[i].loglikelihood, 0.0);
      EXPECT_EQ(got[i].is_greedy, greedy) << i;
      if (batch == 1) by_one.push_back(got[i]);
      else EXPECT_NEAR(got[i].loglikelihood, by_one[i].loglikelihood, 1e-5) << i;
    }
  }
}

TEST_F(TinyLlamaLoglik, GreedyContinuationIsGreedyAndAPerturbedOneIsNot) {
  LoglikTokens t;
  t.context = {1, 45, 200, 17, 333, 90};
  t.continuation = greedy_continuation(t.context, 5);
  LoglikTokens bad = t;
  bad.continuation[2] = (bad.continuation[2] + 1) % kVocab;  // not the argmax there
  const std::vector<LoglikRequest> requests = {make_loglik_request(0, t, 64, "test"),
                                               make_loglik_request(1, bad, 64, "test")};
  LoglikOptions o;
  o.batch_size = 2;
  const auto got = score_loglik_requests(*model_, requests, o);
  EXPECT_TRUE(got[0].is_greedy);
  EXPECT_FALSE(got[1].is_greedy);
  EXPECT_GT(got[0].loglikelihood, got[1].loglikelihood);
  EXPECT_NEAR(got[0].loglikelihood, naive(t).first, 1e-4);
  EXPECT_NEAR(got[1].loglikelihood, naive(bad).first, 1e-4);
}

TEST_F(TinyLlamaLoglik, TruncatedRequestScoresItsLastMaxLengthTokens) {
  LoglikTokens t;
  for (std::int64_t i = 0; i < 20; ++i) t.context.push_back(3 + (i * 37) % (kVocab - 3));
  t.continuation = {50, 60, 70};
  const auto q = make_loglik_request(0, t, 10, "test");
  ASSERT_EQ(q.input.size(), 10u);
  // the same as scoring the last 11 tokens with a context of 8
  LoglikTokens cut;
  cut.context.assign(t.context.end() - 8, t.context.end());
  cut.continuation = t.continuation;
  const auto got = score_loglik_requests(*model_, {q}, {});
  EXPECT_NEAR(got[0].loglikelihood, naive(cut).first, 1e-4);
  EXPECT_GT(std::fabs(got[0].loglikelihood - naive(t).first), 1e-6);  // the cut context matters
}

// log_softmax(row)[token] in double, as an independent reference.
double log_softmax_at(const float* row, std::int64_t vocab, std::int64_t token) {
  double mx = row[0], sum = 0;
  for (std::int64_t v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
  for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[token]) - mx - std::log(sum);
}

// Every prompt of the oracle's reference.h5, two requests each, batched together (batch 3):
//   the prompt split in half: the log-likelihood of its second half from transformers' prompt_logits;
//   the prompt + its first 8 greedy tokens (generate, do_sample=False): is_greedy must hold, the
//   log-likelihood from transformers' step_logits (the rows that chose those tokens).
// Returns the largest |difference| against transformers (whole request).
double max_diff_against_transformers(const std::string& fixture) {
  const auto model = load_causal_lm({fixture});
  H5Reader ref(fixture + "/reference.h5");
  const std::int64_t vocab = model->vocab_size();
  std::vector<LoglikRequest> requests;
  std::vector<double> expected;
  std::vector<bool> expect_greedy;
  for (const auto& id : ref.read_strings("/ids")) {
    const std::string g = "/samples/" + id;
    const Ids ids = ref.read_i64(g + "/input_ids");
    const auto prompt_logits = ref.read_f32(g + "/prompt_logits");
    const Ids generated = ref.read_i64(g + "/generated_ids");
    const auto step_logits = ref.read_f32(g + "/step_logits");
    EXPECT_EQ(prompt_logits.size(), ids.size() * static_cast<std::size_t>(vocab)) << fixture;
    const std::size_t half = ids.size() / 2;
    LoglikTokens split{Ids(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(half)),
                       Ids(ids.begin() + static_cast<std::ptrdiff_t>(half), ids.end())};
    double ll = 0;
    for (std::size_t k = half; k < ids.size(); ++k)
      ll += log_softmax_at(prompt_logits.data() + (k - 1) * static_cast<std::size_t>(vocab), vocab, ids[k]);
    requests.push_back(make_loglik_request(requests.size(), split, 4096, id));
    expected.push_back(ll);
    expect_greedy.push_back(false);  // not checked: a prompt is not the model's greedy text
    LoglikTokens greedy{ids, Ids(generated.begin(), generated.begin() + 8)};
    ll = 0;
    for (std::size_t k = 0; k < 8; ++k)
      ll += log_softmax_at(step_logits.data() + k * static_cast<std::size_t>(vocab), vocab, generated[k]);
    requests.push_back(make_loglik_request(requests.size(), greedy, 4096, id));
    expected.push_back(ll);
    expect_greedy.push_back(true);
  }
  EXPECT_GE(requests.size(), 4u) << fixture;
  LoglikOptions o;
  o.batch_size = 3;
  const auto got = score_loglik_requests(*model, requests, o);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    // float32 logits within ~1e-5 of transformers' (oracle README) put each token's log-prob within
    // ~2e-5; the sum over num_tokens tokens within that many times as much
    EXPECT_NEAR(got[i].loglikelihood, expected[i], 2e-5 * static_cast<double>(got[i].num_tokens))
        << fixture << " request " << i;
    if (expect_greedy[i]) {
      EXPECT_TRUE(got[i].is_greedy) << fixture << " request " << i;
    }
    worst = std::max(worst, std::fabs(got[i].loglikelihood - expected[i]));
  }
  return worst;
}

TEST(LoglikOracle, MatchesTransformersLogitsOnDecoderFixtures) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  for (const char* fixture : {"mistral", "qwen2"}) {
    const double worst = max_diff_against_transformers(data + "/oracle/" + fixture);
    std::printf("loglikelihood vs transformers, %s: max |diff| %.3g\n", fixture, worst);
  }
}

}  // namespace
}  // namespace evalrun
