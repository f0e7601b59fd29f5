// task/generate: greedy generation on a tiny random Llama (make_llama_checkpoint): results must not
// depend on batch size or padding, early stopping, fixed/min padding, truncation, kept logits, the
// latency summary; and stories260K (shared data) reproduces its README continuation.
#include "task/generate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/errors.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "test_util.hpp"
#include "fixtures/tiny_bpe.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

constexpr std::int64_t kVocab = 400;  // the tiny BPE tokenizer's size, so the model and tokenizer agree

class TinyLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::make_temp_dir("evalrun-gen"));
    make_llama_checkpoint(dir_->string(), "tiny-llama", 11, kVocab);
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

  // Eight prompts of lengths 2..23 with random ids (no specials), indices 100.. .
  static std::vector<GenerationItem> items() {
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::int64_t> id(4, kVocab - 1);
    std::vector<GenerationItem> out;
    const int lengths[] = {7, 2, 23, 11, 5, 16, 9, 3};
    for (int i = 0; i < 8; ++i) {
      GenerationItem it;
      it.index = 100 + static_cast<std::uint64_t>(i);
      it.id = "p";
      it.id += std::to_string(i);
      for (int k = 0; k < lengths[i]; ++k) it.prompt_ids.push_back(id(rng));
      out.push_back(std::move(it));
    }
    return out;
  }

  static GenerationOptions full_run(int batch) {
    GenerationOptions o;
    o.max_new_tokens = 12;
    o.batch_size = batch;
    o.keep_logits = -1;
    o.no_early_termination = true;
    return o;
  }

  static std::vector<GenerationResult> run(const std::vector<GenerationItem>& its, const GenerationOptions& o,
                                           const Ids& stop = {}) {
    return run_generation(*model_, its, o, stop, /*pad_id=*/1);
  }

  static float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
  }

  static fs::path* dir_;
  static LlamaModel* model_;
};
fs::path* TinyLlama::dir_ = nullptr;
LlamaModel* TinyLlama::model_ = nullptr;

TEST_F(TinyLlama, BatchSizeAndPaddingDoNotChangeTokensOrLogits) {
  const auto its = items();
  const auto one = run(its, full_run(1));
  ASSERT_EQ(one.size(), its.size());
  for (std::size_t i = 0; i < its.size(); ++i) {
    EXPECT_EQ(one[i].index, its[i].index);
    ASSERT_EQ(one[i].generated_ids.size(), 12u);
    ASSERT_EQ(one[i].step_logits.size(), 12u * kVocab);
    EXPECT_EQ(one[i].vocab, kVocab);
    EXPECT_EQ(one[i].batch_rows, 1);
    EXPECT_EQ(one[i].padded_length, static_cast<std::int64_t>(its[i].prompt_ids.size()));
    EXPECT_EQ(one[i].step_seconds.size(), 12u);
    EXPECT_EQ(one[i].step_seconds[0], one[i].prefill_seconds);
    // Each token is the argmax of the logits kept for its step.
    for (int s = 0; s < 12; ++s) {
      const float* row = one[i].step_logits.data() + s * kVocab;
      EXPECT_EQ(std::max_element(row, row + kVocab) - row, one[i].generated_ids[s]);
    }
  }
  for (int batch : {3, 8}) {
    const auto b = run(its, full_run(batch));
    for (std::size_t i = 0; i < its.size(); ++i) {
      EXPECT_EQ(b[i].index, its[i].index);
      EXPECT_EQ(b[i].generated_ids, one[i].generated_ids) << "batch " << batch << " item " << i;
      EXPECT_LE(max_abs_diff(b[i].step_logits, one[i].step_logits), 1e-5f) << "batch " << batch << " item " << i;
    }
    if (batch == 8) {
      for (const auto& r : b) {
        EXPECT_EQ(r.batch_rows, 8);
        EXPECT_EQ(r.padded_length, 23);  // left-padded to the longest prompt
      }
    }
  }
  // min_pad_length pads every prompt further; nothing changes either.
  auto o = full_run(3);
  o.min_pad_length = 40;
  const auto padded = run(its, o);
  for (std::size_t i = 0; i < its.size(); ++i) {
    EXPECT_EQ(padded[i].padded_length, 40);
    EXPECT_EQ(padded[i].generated_ids, one[i].generated_ids) << i;
    EXPECT_LE(max_abs_diff(padded[i].step_logits, one[i].step_logits), 1e-5f) << i;
  }
}

// The per-batch report (what the run journal records as the run goes): every item exactly once, and
// what it shows of an item when its batch ends is its final result.
TEST_F(TinyLlama, BatchDoneReportsEveryItemOnceWithItsFinalResult) {
  const auto its = items();
  std::vector<int> reported(its.size(), 0);
  std::vector<GenerationResult> seen(its.size());
  int calls = 0;
  auto o = full_run(3);
  o.no_early_termination = false;
  const auto out = run_generation(*model_, its, o, {2}, 1,
                                  [&](const std::vector<GenerationResult>& results, const std::vector<std::size_t>& done) {
                                    ++calls;
                                    EXPECT_LE(done.size(), 3u);
                                    for (std::size_t i : done) {
                                      ++reported[i];
                                      seen[i] = results[i];
                                    }
                                  });
  EXPECT_EQ(calls, 3);  // 8 items in batches of 3
  for (std::size_t i = 0; i < its.size(); ++i) {
    EXPECT_EQ(reported[i], 1) << i;
    EXPECT_EQ(seen[i].index, its[i].index);
    EXPECT_EQ(seen[i].generated_ids, out[i].generated_ids) << i;
    EXPECT_EQ(seen[i].step_logits, out[i].step_logits) << i;
    EXPECT_EQ(seen[i].step_seconds, out[i].step_seconds) << i;
    EXPECT_FALSE(seen[i].generated_ids.empty());
  }
}

TEST_F(TinyLlama, StopsAtAStopIdPerSequenceUnlessNoEarlyTermination) {
  const auto its = items();
  const auto ref = run(its, full_run(1));
  // Item 2's first token at a step k >= 3 that it has not emitted before: stopping on it must end
  // item 2 exactly at step k, stop token included.
  const Ids& seq = ref[2].generated_ids;
  std::size_t k = 3;
  while (k < seq.size() && std::find(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(k), seq[k]) !=
                               seq.begin() + static_cast<std::ptrdiff_t>(k)) {
    ++k;
  }
  ASSERT_LT(k, seq.size()) << "no fresh token in item 2's continuation; pick another seed";
  const std::int64_t stop = seq[k];

  auto o = full_run(3);
  o.no_early_termination = false;
  o.keep_logits = 4;
  const auto stopped = run(its, o, {stop});
  for (std::size_t i = 0; i < its.size(); ++i) {
    const Ids& full = ref[i].generated_ids;
    const auto at = std::find(full.begin(), full.end(), stop);
    const Ids expect(full.begin(), at == full.end() ? full.end() : at + 1);
    EXPECT_EQ(stopped[i].generated_ids, expect) << "item " << i;
    EXPECT_EQ(stopped[i].stopped, at != full.end()) << "item " << i;
    EXPECT_EQ(stopped[i].step_seconds.size(), expect.size());
    // Top-4 per generated token, best first: its first id is the token.
    ASSERT_EQ(stopped[i].topk_ids.size(), 4 * expect.size());
    ASSERT_EQ(stopped[i].topk_logits.size(), 4 * expect.size());
    for (std::size_t s = 0; s < expect.size(); ++s) {
      EXPECT_EQ(stopped[i].topk_ids[4 * s], expect[s]);
      EXPECT_NEAR(stopped[i].topk_logits[4 * s], ref[i].step_logits[s * kVocab + expect[s]], 1e-5);
      EXPECT_GE(stopped[i].topk_logits[4 * s], stopped[i].topk_logits[4 * s + 3]);
    }
    EXPECT_TRUE(stopped[i].step_logits.empty());
  }
  EXPECT_EQ(stopped[2].generated_ids.size(), k + 1);
  EXPECT_TRUE(stopped[2].stopped);

  // The same stop id with no_early_termination: every item runs to max_new_tokens.
  o.no_early_termination = true;
  const auto through = run(its, o, {stop});
  for (std::size_t i = 0; i < its.size(); ++i) {
    EXPECT_EQ(through[i].generated_ids, ref[i].generated_ids) << i;
    EXPECT_FALSE(through[i].stopped);
  }
}

// stop_when (generate_until's stop strings): each row ends at the first step where the predicate on its
// own ids holds, whatever batch it shares; the predicate sees every step's ids of that row.
TEST_F(TinyLlama, StopWhenEndsEachRowWhereItsOwnIdsSayAndNotOthers) {
  const auto its = items();
  const auto ref = run(its, full_run(1));
  // Stop a row once it has generated a pair (a, b) equal to ref item 0's tokens 2-3: rows that never
  // generate that pair run to max_new_tokens.
  const std::int64_t a = ref[0].generated_ids[2], b = ref[0].generated_ids[3];
  auto stop_at_pair = [a, b](const Ids& g) { return g.size() >= 2 && g[g.size() - 2] == a && g.back() == b; };
  for (int batch : {1, 3, 8}) {
    auto o = full_run(batch);
    o.no_early_termination = false;
    o.keep_logits = 0;
    o.stop_when = stop_at_pair;
    const auto stopped = run(its, o);
    for (std::size_t i = 0; i < its.size(); ++i) {
      const Ids& full = ref[i].generated_ids;
      std::size_t end = full.size();
      for (std::size_t s = 1; s < full.size(); ++s) {
        if (full[s - 1] == a && full[s] == b) {
          end = s + 1;
          break;
        }
      }
      EXPECT_EQ(stopped[i].generated_ids, Ids(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(end)))
          << "batch " << batch << " item " << i;
      EXPECT_EQ(stopped[i].stopped, end < full.size() || stop_at_pair(full)) << "batch " << batch << " item " << i;
    }
    EXPECT_EQ(stopped[0].generated_ids.size(), 4u);
  }
  // no_early_termination wins over stop_when, as over stop ids.
  auto o = full_run(2);
  o.stop_when = stop_at_pair;
  const auto through = run(its, o);
  for (std::size_t i = 0; i < its.size(); ++i) EXPECT_EQ(through[i].generated_ids, ref[i].generated_ids) << i;
}

TEST_F(TinyLlama, PrepareTruncatesToTheFirstTokensAndFixedLengthPadsOrRefuses) {
  const auto tok = DecoderTokenizer::from_dir(dir_->string());
  const std::vector<Prompt> prompts = {{"short", "the cat"},
                                       {"long", "the cat sat on the mat and the dog sat on the log by the door"}};
  GenerationOptions o;
  o.max_new_tokens = 3;
  auto its = prepare_generation_items(prompts, tok, o, 40);
  ASSERT_EQ(its.size(), 2u);
  EXPECT_EQ(its[0].index, 40u);
  EXPECT_EQ(its[1].index, 41u);
  EXPECT_EQ(its[1].id, "long");
  EXPECT_EQ(its[1].prompt_ids, tok.encode(prompts[1].text));
  EXPECT_EQ(its[0].prompt_ids.front(), tok.bos_id());
  const Ids long_ids = its[1].prompt_ids;
  ASSERT_GT(long_ids.size(), 6u);

  o.max_prompt_length = 6;
  its = prepare_generation_items(prompts, tok, o);
  EXPECT_EQ(its[1].prompt_ids, Ids(long_ids.begin(), long_ids.begin() + 6));  // the seed keeps the first n
  EXPECT_TRUE(its[1].truncated);
  EXPECT_FALSE(its[0].truncated);

  o.fixed_prompt_length = 6;  // fixed length: no truncation, an error naming the prompt
  try {
    prepare_generation_items(prompts, tok, o);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'long'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fixed_prompt_length"), std::string::npos) << e.what();
  }

  o.fixed_prompt_length = 32;
  o.max_new_tokens = 5;
  o.batch_size = 2;
  o.no_early_termination = true;
  its = prepare_generation_items(prompts, tok, o);
  const auto fixed = run_generation(*model_, its, o, tok.stop_ids(), tok.pad_id());
  o.fixed_prompt_length = 0;
  o.batch_size = 1;
  const auto plain = run_generation(*model_, its, o, tok.stop_ids(), tok.pad_id());
  for (std::size_t i = 0; i < its.size(); ++i) {
    EXPECT_EQ(fixed[i].padded_length, 32);
    EXPECT_EQ(fixed[i].generated_ids, plain[i].generated_ids) << i;
  }
}

TEST_F(TinyLlama, RejectsBadOptionsAndIds) {
  auto its = items();
  auto o = full_run(2);
  o.max_new_tokens = 0;
  EXPECT_THROW(run(its, o), InputError);
  o = full_run(2);
  its[0].prompt_ids[0] = kVocab;  // outside the vocabulary
  EXPECT_THROW(run(its, o), InputError);
  its = items();
  EXPECT_THROW(run_generation(*model_, its, o, {}, /*pad_id=*/-1), InputError);  // padding needed, no pad id
}

// Teacher forcing: feeding a model its own greedy output must change nothing (logits within 1e-5).
TEST_F(TinyLlama, ForcingOwnGreedyOutputReproducesFreeGeneration) {
  const auto its = items();
  const auto ref = run(its, full_run(3));
  auto forced = its;
  for (std::size_t i = 0; i < its.size(); ++i) forced[i].forced_ids = ref[i].generated_ids;
  for (int batch : {1, 3, 8}) {
    auto o = full_run(batch);
    o.max_new_tokens = 2;  // ignored for forced rows: each runs its forced length
    const auto got = run(forced, o);
    for (std::size_t i = 0; i < its.size(); ++i) {
      EXPECT_EQ(got[i].index, its[i].index);
      EXPECT_EQ(got[i].generated_ids, ref[i].generated_ids) << "batch " << batch << " item " << i;
      EXPECT_EQ(got[i].own_ids, ref[i].generated_ids) << "batch " << batch << " item " << i;
      EXPECT_LE(max_abs_diff(got[i].step_logits, ref[i].step_logits), 1e-5f) << "batch " << batch << " item " << i;
      EXPECT_EQ(got[i].step_seconds.size(), 12u);
      EXPECT_FALSE(got[i].stopped);
    }
  }
  // Free rows report own_ids == generated_ids too.
  for (const auto& r : ref) EXPECT_EQ(r.own_ids, r.generated_ids);
}

// Forcing another sequence: what was fed is reported as generated_ids; own_ids are the model's
// argmax at each forced position, and each step's logits are those of prompt + forced prefix.
TEST_F(TinyLlama, ForcingAnotherSequenceKeepsOwnChoicesAndComparableLogits) {
  const auto its = items();
  const auto free = run(its, full_run(1));
  std::mt19937 rng(9);
  std::uniform_int_distribution<std::int64_t> id(4, kVocab - 1);
  auto forced = its;
  for (std::size_t i = 0; i < its.size(); ++i) {
    Ids f(3 + 2 * i);  // 3..17 tokens: some rows run past max_new_tokens, some stop before it
    for (auto& x : f) x = id(rng);
    forced[i].forced_ids = f;
  }
  // Half the rows free, in the same batches as forced ones.
  for (std::size_t i = 1; i < its.size(); i += 2) forced[i].forced_ids.reset();
  auto o = full_run(8);
  o.max_new_tokens = 12;
  const auto got = run(forced, o);
  bool some_differ = false;
  for (std::size_t i = 0; i < its.size(); ++i) {
    SCOPED_TRACE("item " + std::to_string(i));
    if (!forced[i].forced_ids) {  // free rows: unchanged by sharing a batch with longer forced rows
      EXPECT_EQ(got[i].generated_ids, free[i].generated_ids);
      EXPECT_LE(max_abs_diff(got[i].step_logits, free[i].step_logits), 1e-5f);
      continue;
    }
    const Ids& f = *forced[i].forced_ids;
    EXPECT_EQ(got[i].generated_ids, f);
    ASSERT_EQ(got[i].own_ids.size(), f.size());
    ASSERT_EQ(got[i].step_logits.size(), f.size() * kVocab);
    EXPECT_EQ(got[i].step_seconds.size(), f.size());
    EXPECT_EQ(got[i].own_ids[0], free[i].generated_ids[0]);  // the first step sees only the prompt
    for (std::size_t s = 0; s < f.size(); ++s) {
      const float* row = got[i].step_logits.data() + s * kVocab;
      EXPECT_EQ(std::max_element(row, row + kVocab) - row, got[i].own_ids[s]) << "step " << s;
      some_differ = some_differ || got[i].own_ids[s] != f[s];
    }
    // Step k's logits equal free generation's first step on prompt + f[0..k).
    for (std::size_t k : {std::size_t{1}, f.size() - 1}) {
      GenerationItem longer = its[i];
      longer.prompt_ids.insert(longer.prompt_ids.end(), f.begin(), f.begin() + static_cast<std::ptrdiff_t>(k));
      auto one = full_run(1);
      one.max_new_tokens = 1;
      const auto first = run({longer}, one);
      const std::vector<float> expect_row(got[i].step_logits.begin() + static_cast<std::ptrdiff_t>(k * kVocab),
                                          got[i].step_logits.begin() + static_cast<std::ptrdiff_t>((k + 1) * kVocab));
      EXPECT_LE(max_abs_diff(first[0].step_logits, expect_row), 1e-5f) << "step " << k;
      EXPECT_EQ(first[0].generated_ids[0], got[i].own_ids[k]) << "step " << k;
    }
  }
  EXPECT_TRUE(some_differ) << "random forced ids agreed with every argmax";
}

// Forced rows never stop early; a stop id as the last forced token is reported as stopped.
TEST_F(TinyLlama, ForcedRowsRunTheirWholeLengthPastStopIds) {
  auto its = items();
  its.resize(2);
  const Ids f0 = {50, 60, 70, 60, 80};  // stop id 60 in the middle
  const Ids f1 = {90, 91, 60};          // and at the end
  its[0].forced_ids = f0;
  its[1].forced_ids = f1;
  auto o = full_run(2);
  o.no_early_termination = false;
  const auto got = run(its, o, {60});
  EXPECT_EQ(got[0].generated_ids, f0);
  EXPECT_FALSE(got[0].stopped);
  EXPECT_EQ(got[1].generated_ids, f1);
  EXPECT_TRUE(got[1].stopped);
}

TEST_F(TinyLlama, RejectsEmptyOrOutOfVocabularyForcedIds) {
  auto its = items();
  its[3].forced_ids = Ids{};
  try {
    run(its, full_run(2));
    ADD_FAILURE() << "no error for empty forced ids";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'p3'"), std::string::npos) << e.what();
  }
  its[3].forced_ids = Ids{5, kVocab};
  try {
    run(its, full_run(2));
    ADD_FAILURE() << "no error for an out-of-vocabulary forced id";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'p3'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(kVocab)), std::string::npos) << e.what();
  }
}

TEST(LatencySummary, MatchesTheSeedsReport) {
  const auto s = summarize_latencies({0.5, 0.1, 0.3, 0.2});
  EXPECT_DOUBLE_EQ(s.first_token, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_all, 1.1 / 4);
  EXPECT_NEAR(s.mean_next, 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(s.min_next, 0.1);
  EXPECT_EQ(s.min_step, 1);
  EXPECT_DOUBLE_EQ(s.max_next, 0.3);
  EXPECT_EQ(s.max_step, 2);
  EXPECT_NEAR(s.std_next, std::sqrt(0.02 / 3), 1e-15);  // population sd, as np.std
  const auto one = summarize_latencies({0.25});
  EXPECT_DOUBLE_EQ(one.first_token, 0.25);
  EXPECT_DOUBLE_EQ(one.mean_all, 0.25);
  EXPECT_EQ(one.min_step, -1);
}

TEST(GenerateStories, ReproducesTheReadmeContinuation) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/models/stories260K";
  auto model = LlamaModel::load({dir, DType::fp32, "cpu"});
  const auto tok = DecoderTokenizer::from_dir(dir);
  GenerationOptions o;
  o.max_new_tokens = 20;
  o.batch_size = 3;
  o.keep_logits = 5;
  const std::vector<Prompt> prompts = {{"story", "Once upon a time"}, {"b", "The boy"}, {"c", "Lily and Ben went to"}};
  const auto its = prepare_generation_items(prompts, tok, o);
  EXPECT_EQ(its[0].prompt_ids, (Ids{1, 403, 407, 261, 378}));
  const auto res = run_generation(*model, its, o, tok.stop_ids(), tok.pad_id());
  const Ids expect = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292};
  EXPECT_EQ(res[0].generated_ids, expect);
  // README: first step top-5 432:17.7994 383:14.2813 322:9.7096 353:9.5873 323:9.1342
  ASSERT_GE(res[0].topk_ids.size(), 5u);
  EXPECT_EQ(Ids(res[0].topk_ids.begin(), res[0].topk_ids.begin() + 5), (Ids{432, 383, 322, 353, 323}));
  EXPECT_NEAR(res[0].topk_logits[0], 17.7994, 1e-3);
  EXPECT_NEAR(res[0].topk_logits[4], 9.1342, 1e-3);
  EXPECT_EQ(tok.decode(res[0].generated_ids, true).rfind(", there was a little girl named Lily.", 0), 0u);
}

}  // namespace
}  // namespace evalrun
