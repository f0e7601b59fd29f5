// task/multiple_choice: lm-eval's acc / acc_norm decisions by hand (ties go to the first choice,
// acc_norm divides by code points so a multi-byte choice changes the answer), mean_stderr on a small
// case, and the scores of shared-context documents on a tiny random Llama against a naive full
// forward per request (independent of the task code) with share_context on and off, batch 1 and 3.
#include "task/multiple_choice.hpp"

#include "common/utf8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <random>

#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "io/hdf5_file.hpp"
#include "model/llama.hpp"
#include "model/registry.hpp"
#include "task/lm_eval_stats.hpp"
#include "task/mc_report.hpp"
#include "task/task_file.hpp"
#include "test_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

TEST(McDecision, TiesGoToTheFirstChoiceAsNumpyArgmax) {
  const auto d = decide_multiple_choice({-2.0, -1.5, -1.5, -3.0}, {"ab", "cd", "ef", "gh"}, 2, "t");
  EXPECT_EQ(d.pred, 1);
  EXPECT_FALSE(d.acc);
  EXPECT_EQ(d.pred_norm, 1);
  EXPECT_FALSE(d.acc_norm);
  const auto e = decide_multiple_choice({-1.0, -1.0}, {"x", "y"}, 0, "t");
  EXPECT_EQ(e.pred, 0);
  EXPECT_TRUE(e.acc);
  EXPECT_TRUE(e.acc_norm);
}

TEST(McDecision, AccNormDividesByCodePointsNotBytes) {
  // "ééé": 3 code points, 6 bytes; "abcd": 4 of each. ll -3.3 vs -4.0:
  //   acc: -3.3 > -4.0 -> 0; code points: -1.1 < -1.0 -> 1; bytes would give -0.55 > -1.0 -> 0.
  EXPECT_EQ(utf8_code_point_count("\xC3\xA9\xC3\xA9\xC3\xA9"), 3u);
  EXPECT_EQ(utf8_code_point_count("\xE2\x82\xAC" "a"), 2u);  // "€a"
  const auto d = decide_multiple_choice({-3.3, -4.0}, {"\xC3\xA9\xC3\xA9\xC3\xA9", "abcd"}, 1, "t");
  EXPECT_EQ(d.pred, 0);
  EXPECT_FALSE(d.acc);
  EXPECT_EQ(d.pred_norm, 1);
  EXPECT_TRUE(d.acc_norm);
  // a longer choice wins acc_norm with the lower total log-likelihood
  const auto e = decide_multiple_choice({-2.0, -3.0}, {"a", "abcdef"}, 0, "t");
  EXPECT_EQ(e.pred, 0);
  EXPECT_EQ(e.pred_norm, 1);
}

TEST(McDecision, BadGoldOrCountsAreInputErrorsNamingTheDocument) {
  try {
    decide_multiple_choice({-1.0, -2.0}, {"a", "b"}, 2, "arc.jsonl:7");
    FAIL() << "a gold outside the choices must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("arc.jsonl:7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decide_multiple_choice({-1.0}, {"a", "b"}, 0, "t"), InputError);
  EXPECT_THROW(decide_multiple_choice({-1.0, -2.0}, {"a", ""}, 0, "t"), InputError);
}

TEST(McMetrics, StderrIsTheSampleStddevOverSqrtN) {
  // acc per document 1, 0, 1, 1: mean 0.75; sample variance (3 * 0.0625 + 0.5625) / 3 = 0.25; 0.5 / 2
  const auto m = mean_with_stderr({1.0, 0.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(m.mean, 0.75);
  EXPECT_NEAR(m.standard_error, 0.25, 1e-15);
}

TEST(McRecords, DocumentWorkAndScoresRoundTrip) {
  McDocWork d;
  d.index = 9;
  LoglikTokens t{{1, 2, 3}, {4, 5}};
  d.requests = {make_loglik_request(20, t, 64, "t"), make_loglik_request(21, {{1, 2, 3}, {6}}, 64, "t")};
  const auto back = from_bytes<McDocWork>(to_bytes(d));
  EXPECT_EQ(back.index, 9u);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_EQ(back.requests[1].target, (Ids{6}));
  EXPECT_EQ(shared_context_length(back), 3u);
  EXPECT_EQ(back.cost(), 4 + 3);
}

TEST(McShared, ContextLengthOnlyForOneUntruncatedContext) {
  McDocWork d;
  d.requests = {make_loglik_request(0, {{1, 2, 3}, {4, 5}}, 64, "t"), make_loglik_request(1, {{1, 2, 9}, {4}}, 64, "t")};
  EXPECT_EQ(shared_context_length(d), 0u);  // partial scoring: different contexts
  d.requests = {make_loglik_request(0, {{1, 2, 3}, {4, 5}}, 3, "t"), make_loglik_request(1, {{1, 2, 3}, {4}}, 3, "t")};
  EXPECT_EQ(shared_context_length(d), 0u);  // the first is left-truncated
}

// log p(continuation | context) from one unpadded forward of context + continuation, log_softmax by
// hand in double; greedy when each token is its row's first maximum. Independent of the task code.
std::pair<double, bool> naive_loglik(CausalLM& model, const LoglikTokens& t) {
  const std::int64_t vocab = model.vocab_size();
  Ids all = t.context;
  all.insert(all.end(), t.continuation.begin(), t.continuation.end());
  const auto len = static_cast<std::int64_t>(all.size()) - 1;  // the last token is only predicted
  Ids pos(static_cast<std::size_t>(len)), mask(pos.size(), 1);
  for (std::int64_t k = 0; k < len; ++k) pos[static_cast<std::size_t>(k)] = k;
  auto cache = model.new_cache(1, len);
  std::vector<float> logits;
  model.forward(all.data(), pos.data(), mask.data(), 1, len, *cache, true, logits);
  double ll = 0;
  bool greedy = true;
  for (std::size_t k = t.context.size(); k < all.size(); ++k) {
    const float* row = logits.data() + static_cast<std::int64_t>(k - 1) * vocab;
    std::int64_t best = 0;
    for (std::int64_t v = 1; v < vocab; ++v)
      if (row[v] > row[best]) best = v;
    double sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - row[best]);
    ll += static_cast<double>(row[all[k]]) - row[best] - std::log(sum);
    greedy = greedy && best == all[k];
  }
  return {ll, greedy};
}

class TinyLlamaMc : public ::testing::Test {
 protected:
  static constexpr std::int64_t kVocab = 300;
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::make_temp_dir("evalrun-mc"));
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

  static std::pair<double, bool> naive(const LoglikTokens& t) { return naive_loglik(*model_, t); }

  static inline fs::path* dir_ = nullptr;
  static inline LlamaModel* model_ = nullptr;
};

TEST_F(TinyLlamaMc, SharedAndSeparateContextsEqualANaiveForwardPerRequest) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> id(3, kVocab - 1);
  std::uniform_int_distribution<int> len(1, 12);
  std::vector<McDocWork> docs;
  std::vector<std::vector<LoglikTokens>> tokens;
  std::uint64_t request = 0;
  for (std::uint64_t d = 0; d < 7; ++d) {
    McDocWork doc;
    doc.index = d;
    Ids context = {1};
    for (int k = len(rng); k > 0; --k) context.push_back(id(rng));
    std::vector<LoglikTokens> toks;
    const int choices = 2 + static_cast<int>(d % 4);  // 2..5 choices
    for (int c = 0; c < choices; ++c) {
      LoglikTokens t{context, {}};
      const int n = (c == 1) ? 1 : 1 + len(rng) % 5;  // a one-token choice in every document
      for (int k = 0; k < n; ++k) t.continuation.push_back(id(rng));
      doc.requests.push_back(make_loglik_request(request++, t, 64, "test"));
      toks.push_back(t);
    }
    docs.push_back(doc);
    tokens.push_back(toks);
  }
  // A document whose choices have different contexts (partial scoring) goes request by request.
  {
    McDocWork doc;
    doc.index = 7;
    std::vector<LoglikTokens> toks = {{{1, 40, 41}, {50, 51}}, {{1, 40, 42, 43}, {50, 51}}};
    for (const auto& t : toks) doc.requests.push_back(make_loglik_request(request++, t, 64, "test"));
    docs.push_back(doc);
    tokens.push_back(toks);
  }
  ASSERT_GT(shared_context_length(docs[0]), 0u);
  ASSERT_EQ(shared_context_length(docs[7]), 0u);
  std::vector<McDocScores> first;
  for (bool share : {true, false}) {
    for (int batch : {1, 3}) {
      McOptions o;
      o.batch_size = batch;
      o.share_context = share;
      std::size_t reported = 0;
      const auto got = score_mc_documents(*model_, docs, o,
                                          [&](const std::vector<McDocScores>&, const std::vector<std::size_t>& m) {
                                            reported += m.size();
                                          });
      EXPECT_EQ(reported, docs.size());
      ASSERT_EQ(got.size(), docs.size());
      for (std::size_t d = 0; d < docs.size(); ++d) {
        EXPECT_EQ(got[d].index, docs[d].index);
        ASSERT_EQ(got[d].choices.size(), tokens[d].size());
        for (std::size_t c = 0; c < tokens[d].size(); ++c) {
          const auto [ll, greedy] = naive(tokens[d][c]);
          const auto& s = got[d].choices[c];
          EXPECT_EQ(s.index, docs[d].requests[c].index);
          EXPECT_EQ(s.num_tokens, static_cast<std::int64_t>(tokens[d][c].continuation.size()));
          EXPECT_NEAR(s.loglikelihood, ll, 1e-4) << "doc " << d << " choice " << c << " share " << share << " batch " << batch;
          EXPECT_LT(s.loglikelihood, 0.0);
          EXPECT_EQ(s.is_greedy, greedy) << d << "/" << c;
          if (first.size() == docs.size()) {
            EXPECT_NEAR(s.loglikelihood, first[d].choices[c].loglikelihood, 1e-5) << d << "/" << c;
          }
        }
      }
      if (first.empty()) first = got;
    }
  }
}

// A document as the task-file reader gives it: its choices encoded as lm-eval encodes them share the
// context's tokens, so the shared path runs, and the decisions follow the scores.
TEST_F(TinyLlamaMc, TextDocumentEncodesToASharedContextAndScoresAsEachRequestAlone) {
  const auto tok = DecoderTokenizer::from_dir(dir_->string());
  const Encode enc = [&](std::string_view s) { return tok.encode(s); };
  const Encode plain = [&](std::string_view s) { return tok.encode_without_bos(s); };
  TaskDocument doc;
  doc.where = "tiny.jsonl:1";
  doc.choices = {"the mat", "a dog", "on the cat sat"};
  doc.gold = 0;
  for (const auto& c : doc.choices) doc.requests.push_back({"the cat sat on ", " " + c});
  const McDocWork w = make_mc_work(3, doc, 30, enc, plain, tok.bos_id(), 64);
  ASSERT_EQ(w.requests.size(), 3u);
  EXPECT_EQ(w.requests[2].index, 32u);
  EXPECT_EQ(shared_context_length(w), tok.encode("the cat sat on").size());
  McOptions shared, alone;
  alone.share_context = false;
  const auto a = score_mc_documents(*model_, {w}, shared), b = score_mc_documents(*model_, {w}, alone);
  std::vector<double> ll;
  for (std::size_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(a[0].choices[c].loglikelihood, b[0].choices[c].loglikelihood, 1e-5) << c;
    ll.push_back(a[0].choices[c].loglikelihood);
  }
  const auto d = decide_multiple_choice(ll, doc.choices, doc.gold, doc.where);
  EXPECT_EQ(d.pred, static_cast<std::int64_t>(std::max_element(ll.begin(), ll.end()) - ll.begin()));
  EXPECT_EQ(d.acc, d.pred == 0);
  // a too long choice names the document
  doc.requests[1].continuation = std::string(400, 'x');
  try {
    make_mc_work(0, doc, 0, enc, plain, tok.bos_id(), 16);
    FAIL() << "a continuation longer than the model must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny.jsonl:1 (choice 1)"), std::string::npos) << e.what();
  }
}

// A task file through the task-file reader (task/task_file.hpp), 1-shot: every document's requests
// encode to one shared context, the shared scores equal each request alone and the naive forward, and
// the samples lines carry the decisions.
TEST_F(TinyLlamaMc, TaskFileDocumentsScoreTheSameSharedOrAlone) {
  const fs::path dir = testing::make_temp_dir("evalrun-mc-task");
  std::ofstream(dir / "docs.jsonl")
      << R"({"question": "Which is a liquid?", "choices": {"text": ["rock", "water", "ice"], "label": ["A", "B", "C"]}, "answerKey": "B"})"
      << "\n"
      << R"({"question": "What gives light?", "choices": {"text": ["sun", "moon", "caf\u00e9"], "label": ["A", "B", "C"]}, "answerKey": "A"})"
      << "\n"
      << R"({"question": "What is cold?", "choices": {"text": ["ice", "fire"], "label": ["A", "B"]}, "answerKey": "A"})"
      << "\n";
  std::ofstream(dir / "arc.toml") << "name = \"arc_like\"\noutput_type = \"multiple_choice\"\ndataset = \"docs.jsonl\"\n"
                                     "doc_to_text = \"Question: {{question}}\\nAnswer:\"\n"
                                     "doc_to_choice = \"{{choices.text}}\"\n"
                                     "doc_to_target = \"{{choices.label.index(answerKey)}}\"\n";
  const TaskFile task = read_task_file((dir / "arc.toml").string());
  FewshotSpec fewshot;
  fewshot.num_fewshot = 1;
  const auto documents = build_task_documents(task, "", fewshot, 0);
  ASSERT_EQ(documents.size(), 3u);
  const auto tok = DecoderTokenizer::from_dir(dir_->string());
  const Encode enc = [&](std::string_view s) { return tok.encode(s); };
  const Encode plain = [&](std::string_view s) { return tok.encode_without_bos(s); };
  std::vector<McDocWork> work;
  std::uint64_t request = 0;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    EXPECT_NE(documents[d].requests.front().context.find("\n\n"), std::string::npos) << "1-shot prompt expected";
    work.push_back(make_mc_work(d, documents[d], request, enc, plain, tok.bos_id(), 256));
    request += documents[d].requests.size();
    EXPECT_GT(shared_context_length(work.back()), 0u) << d;
  }
  McOptions shared, alone;
  shared.batch_size = 2;
  alone.share_context = false;
  const auto a = score_mc_documents(*model_, work, shared), b = score_mc_documents(*model_, work, alone);
  for (std::size_t d = 0; d < documents.size(); ++d) {
    std::vector<double> ll;
    for (std::size_t c = 0; c < documents[d].requests.size(); ++c) {
      EXPECT_NEAR(a[d].choices[c].loglikelihood, b[d].choices[c].loglikelihood, 1e-5) << d << "/" << c;
      LoglikTokens t = encode_loglik_pair(documents[d].requests[c].context, documents[d].requests[c].continuation, enc,
                                          plain, tok.bos_id());
      EXPECT_NEAR(a[d].choices[c].loglikelihood, naive(t).first, 1e-4) << d << "/" << c;
      ll.push_back(a[d].choices[c].loglikelihood);
    }
    const auto decision = decide_multiple_choice(ll, documents[d].choices, documents[d].gold, documents[d].where);
    const auto line = nlohmann::json::parse(lm_eval_sample_line(documents[d], a[d], decision));
    EXPECT_EQ(line["doc_id"], documents[d].doc_id);
    EXPECT_EQ(line["target"], documents[d].gold);
    EXPECT_EQ(line["acc"], decision.acc ? 1.0 : 0.0);
    EXPECT_EQ(line["arguments"].size(), documents[d].requests.size());
    EXPECT_EQ(line["doc_hash"].get<std::string>().size(), 64u);
  }
  fs::remove_all(dir);
}

// tiny-mistral's sliding window of 8: documents around the window (cache 4..14 slots) and batches that
// would outgrow it; every score must still equal the naive forward (which applies the window by
// position), with the shared context on and off, batch 1 and 4.
TEST(McWindow, SlidingWindowModelScoresEqualTheNaiveForward) {
  const fs::path dir = testing::make_temp_dir("evalrun-mc-mistral");
  make_llama_checkpoint(dir.string(), "tiny-mistral", 3, 300);
  const auto model = load_causal_lm({dir.string()});
  ASSERT_EQ(model->dims().sliding_window, 8);
  std::mt19937 rng(17);
  std::uniform_int_distribution<std::int64_t> id(3, 299);
  std::vector<McDocWork> docs;
  std::vector<std::vector<LoglikTokens>> tokens;
  std::uint64_t request = 0;
  for (std::uint64_t d = 0; d < 9; ++d) {
    McDocWork w;
    w.index = d;
    Ids context = {1};
    for (std::uint64_t k = 0; k < 2 + d % 5; ++k) context.push_back(id(rng));  // 3..7 tokens
    std::vector<LoglikTokens> toks;
    for (std::uint64_t c = 0; c < 2 + d % 3; ++c) {
      LoglikTokens t{context, {}};
      for (std::uint64_t k = 0; k < 1 + (d + c) % 4; ++k) t.continuation.push_back(id(rng));
      w.requests.push_back(make_loglik_request(request++, t, 64, "test"));
      toks.push_back(t);
    }
    docs.push_back(w);
    tokens.push_back(toks);
  }
  for (bool share : {true, false})
    for (int batch : {1, 4}) {
      McOptions o;
      o.batch_size = batch;
      o.share_context = share;
      const auto got = score_mc_documents(*model, docs, o);
      for (std::size_t d = 0; d < docs.size(); ++d)
        for (std::size_t c = 0; c < tokens[d].size(); ++c) {
          const auto [ll, greedy] = naive_loglik(*model, tokens[d][c]);
          EXPECT_NEAR(got[d].choices[c].loglikelihood, ll, 1e-4)
              << "doc " << d << " choice " << c << " share " << share << " batch " << batch;
          EXPECT_EQ(got[d].choices[c].is_greedy, greedy);
        }
    }
  fs::remove_all(dir);
}

// log_softmax(row)[token] in double.
double log_softmax_at(const float* row, std::int64_t vocab, std::int64_t token) {
  double mx = row[0], sum = 0;
  for (std::int64_t v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
  for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[token]) - mx - std::log(sum);
}

// One document per prompt of the oracle's reference.h5, context = the prompt's first half, choices
// (a) its second half, (b) its second half + the first 8 greedy tokens, (c) the first token of the
// second half: transformers' prompt_logits and step_logits give each choice's log-likelihood. Scored
// with the shared context, 2 documents a batch. Returns the largest |difference|.
double shared_context_vs_transformers(const std::string& fixture) {
  const auto model = load_causal_lm({fixture});
  H5Reader ref(fixture + "/reference.h5");
  const std::int64_t vocab = model->vocab_size();
  std::vector<McDocWork> docs;
  std::vector<std::vector<double>> expected;
  std::uint64_t request = 0;
  for (const auto& id : ref.read_strings("/ids")) {
    const std::string g = "/samples/" + id;
    const Ids ids = ref.read_i64(g + "/input_ids");
    const auto prompt_logits = ref.read_f32(g + "/prompt_logits");
    const Ids generated = ref.read_i64(g + "/generated_ids");
    const auto step_logits = ref.read_f32(g + "/step_logits");
    const std::size_t half = ids.size() / 2;
    const Ids context(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(half));
    const Ids rest(ids.begin() + static_cast<std::ptrdiff_t>(half), ids.end());
    double ll_rest = 0;
    for (std::size_t k = half; k < ids.size(); ++k)
      ll_rest += log_softmax_at(prompt_logits.data() + (k - 1) * static_cast<std::size_t>(vocab), vocab, ids[k]);
    double ll_greedy = 0;
    for (std::size_t k = 0; k < 8; ++k)
      ll_greedy += log_softmax_at(step_logits.data() + k * static_cast<std::size_t>(vocab), vocab, generated[k]);
    const double ll_first =
        log_softmax_at(prompt_logits.data() + (half - 1) * static_cast<std::size_t>(vocab), vocab, ids[half]);
    Ids longer = rest;
    longer.insert(longer.end(), generated.begin(), generated.begin() + 8);
    McDocWork w;
    w.index = docs.size();
    for (const Ids* cont : {&rest, static_cast<const Ids*>(&longer)}) w.requests.push_back(make_loglik_request(request++, {context, *cont}, 4096, id));
    w.requests.push_back(make_loglik_request(request++, {context, {ids[half]}}, 4096, id));
    EXPECT_EQ(shared_context_length(w), half) << fixture << " " << id;
    docs.push_back(w);
    expected.push_back({ll_rest, ll_rest + ll_greedy, ll_first});
  }
  EXPECT_GE(docs.size(), 2u) << fixture;
  McOptions o;
  o.batch_size = 2;
  const auto got = score_mc_documents(*model, docs, o);
  double worst = 0;
  for (std::size_t d = 0; d < docs.size(); ++d)
    for (std::size_t c = 0; c < 3; ++c) {
      const auto& s = got[d].choices[c];
      // as the loglikelihood oracle test: ~2e-5 per token from float32 logits within ~1e-5
      EXPECT_NEAR(s.loglikelihood, expected[d][c], 2e-5 * static_cast<double>(s.num_tokens))
          << fixture << " document " << d << " choice " << c;
      worst = std::max(worst, std::fabs(s.loglikelihood - expected[d][c]));
    }
  return worst;
}

TEST(McOracle, SharedContextMatchesTransformersLogits) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  for (const char* fixture : {"mistral", "qwen2", "gemma", "granite", "gpt2", "starcoder2"}) {
    const double worst = shared_context_vs_transformers(data + "/oracle/" + fixture);
    std::printf("multiple_choice shared context vs transformers, %s: max |diff| %.3g\n", fixture, worst);
  }
}

}  // namespace
}  // namespace evalrun
