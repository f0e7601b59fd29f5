// BERT, DistilBERT and XLM-R against the Hugging Face reference outputs in $EVALRUN_DATA_DIR/oracle (see
// its README): bert-qa (token type ids 0 / 1), bert-mlm (tied decoder, cls.predictions head),
// distilbert-qa (no token types, q_lin / ffn.lin1 names), xlmr-qa / xlmr-mlm, each sample alone and
// all of them as one right-padded batch, on the input ids transformers' tokenizers gave.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "io/hdf5_file.hpp"
#include "model/registry.hpp"
#include "model/roberta.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct Sample {
  std::string id;
  std::vector<std::int64_t> ids, types;
  std::vector<float> start, end;  // qa
};

// Right-pads rows into one [n, max_len] batch: pad id, mask 0, type 0.
struct Padded {
  std::vector<std::int64_t> ids, mask, types;
  std::int64_t seq = 0;
};
Padded pad_rows(const std::vector<Sample>& rows, std::int64_t pad_id) {
  Padded p;
  for (const auto& r : rows) p.seq = std::max<std::int64_t>(p.seq, r.ids.size());
  p.ids.assign(rows.size() * p.seq, pad_id);
  p.mask.assign(rows.size() * p.seq, 0);
  p.types.assign(rows.size() * p.seq, 0);
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (std::size_t t = 0; t < rows[b].ids.size(); ++t) {
      p.ids[b * p.seq + t] = rows[b].ids[t];
      p.mask[b * p.seq + t] = 1;
      if (!rows[b].types.empty()) p.types[b * p.seq + t] = rows[b].types[t];
    }
  }
  return p;
}

// The README's best span: max start[i] + end[j] (float32 sum, first maximum in (i, j) order) over
// context tokens with i <= j < i + 30.
std::pair<std::int64_t, std::int64_t> best_span(const std::vector<float>& start, const std::vector<float>& end,
                                                const std::vector<std::int64_t>& context) {
  std::pair<std::int64_t, std::int64_t> best{-1, -1};
  float best_score = -INFINITY;
  for (auto i : context) {
    for (auto j : context) {
      if (j < i || j >= i + 30) continue;
      const float s = start[i] + end[j];
      if (s > best_score) {
        best_score = s;
        best = {i, j};
      }
    }
  }
  return best;
}

// QA fixture: every sample alone (with its token types when `types`), then all as one padded batch.
// Returns the worst |diff| over both.
float check_qa(const std::string& dir, bool types) {
  auto model = RobertaModel::load({dir, DType::fp32, "cpu"});
  EXPECT_EQ(model->head(), EncoderHead::question_answering);
  EXPECT_EQ(model->uses_token_types(), types);
  H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  EXPECT_EQ(ids.size(), 6u);
  std::vector<Sample> samples;
  float worst = 0;
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    Sample s{id, ref.read_i64(g + "/input_ids"), {}, ref.read_f32(g + "/start_logits"), ref.read_f32(g + "/end_logits")};
    if (types) s.types = ref.read_i64(g + "/token_type_ids");
    const std::vector<std::int64_t> mask(s.ids.size(), 1);
    std::vector<float> start, end;
    model->question_answering(s.ids.data(), mask.data(), types ? s.types.data() : nullptr, 1, s.ids.size(), start, end);
    EXPECT_EQ(start.size(), s.start.size()) << id;
    if (start.size() != s.start.size()) return INFINITY;
    const float d = std::max(max_abs_diff(start.data(), s.start.data(), start.size()),
                             max_abs_diff(end.data(), s.end.data(), end.size()));
    EXPECT_LT(d, 1e-4f) << dir << " " << id;
    worst = std::max(worst, d);
    const auto span = best_span(start, end, ref.read_i64(g + "/context_positions"));
    EXPECT_EQ(span.first, ref.attr_int(g, "best_start")) << id;
    EXPECT_EQ(span.second, ref.attr_int(g, "best_end")) << id;
    samples.push_back(std::move(s));
  }

  Padded p = pad_rows(samples, model->pad_token_id());
  std::vector<float> start, end;
  model->question_answering(p.ids.data(), p.mask.data(), types ? p.types.data() : nullptr, samples.size(), p.seq,
                            start, end);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::size_t len = samples[i].ids.size();
    const float d = std::max(max_abs_diff(start.data() + i * p.seq, samples[i].start.data(), len),
                             max_abs_diff(end.data() + i * p.seq, samples[i].end.data(), len));
    EXPECT_LT(d, 1e-4f) << dir << " padded batch, row " << i;
    worst = std::max(worst, d);
  }

  // The token types reach the model: all 0 changes BERT's logits by far more than float noise (the
  // README's "feature matters": 4.48) and DistilBERT's not at all.
  model->question_answering(p.ids.data(), p.mask.data(), nullptr, samples.size(), p.seq, start, end);
  float moved = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    moved = std::max(moved, max_abs_diff(start.data() + i * p.seq, samples[i].start.data(), samples[i].ids.size()));
  }
  if (types) {
    EXPECT_GT(moved, 0.1f);
  } else {
    EXPECT_LT(moved, 1e-4f);
  }
  return worst;
}

TEST(BertOracle, QuestionAnsweringWithTokenTypesMatchesHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/bert-qa";
  EXPECT_STREQ(find_architecture(dir).name, "BertForQuestionAnswering");
  const float worst = check_qa(dir, true);
  std::printf("bert-qa max |diff| vs HF (alone and padded batch of 6): %.3g\n", worst);
}

TEST(BertOracle, DistilBertQuestionAnsweringMatchesHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/distilbert-qa";
  EXPECT_STREQ(find_architecture(dir).name, "DistilBertForQuestionAnswering");
  const float worst = check_qa(dir, false);
  std::printf("distilbert-qa max |diff| vs HF (alone and padded batch of 6): %.3g\n", worst);
}

// MLM fixture: full logits and mask logits / top-5 of every sample alone (with its token types when
// `types`), then the mask logits of all samples as one padded batch. Returns the worst |diff|.
float check_mlm(const std::string& dir, bool types, std::size_t masks) {
  auto model = RobertaModel::load({dir, DType::fp32, "cpu"});
  EXPECT_EQ(model->head(), EncoderHead::masked_lm);
  const std::int64_t V = model->vocab_size();
  H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  EXPECT_EQ(ids.size(), 6u);

  float worst = 0;
  std::vector<Sample> samples;
  std::vector<std::pair<std::int64_t, std::int64_t>> batch_pairs;
  std::vector<float> batch_want;
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    Sample s{id, ref.read_i64(g + "/input_ids"), {}, {}, {}};
    if (types) s.types = ref.read_i64(g + "/token_type_ids");
    const std::int64_t* type_ids = types ? s.types.data() : nullptr;
    const auto positions = ref.read_i64(g + "/mask_positions");
    const auto want_all = ref.read_f32(g + "/logits");
    const auto want_mask = ref.read_f32(g + "/mask_logits");
    const auto want_topk = ref.read_i64(g + "/topk_ids");
    const std::int64_t L = s.ids.size();
    const std::vector<std::int64_t> mask(L, 1);

    // Logits at every position: the whole [L, V] reference.
    std::vector<std::pair<std::int64_t, std::int64_t>> every;
    for (std::int64_t t = 0; t < L; ++t) every.emplace_back(0, t);
    std::vector<float> logits;
    model->masked_lm(s.ids.data(), mask.data(), type_ids, 1, L, every, logits);
    EXPECT_EQ(logits.size(), want_all.size()) << id;
    if (logits.size() != want_all.size()) return INFINITY;
    const float d_all = max_abs_diff(logits.data(), want_all.data(), logits.size());
    EXPECT_LT(d_all, 1e-4f) << dir << " " << id;
    worst = std::max(worst, d_all);

    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (auto p : positions) pairs.emplace_back(0, p);
    model->masked_lm(s.ids.data(), mask.data(), type_ids, 1, L, pairs, logits);
    EXPECT_EQ(logits.size(), want_mask.size()) << id;
    if (logits.size() != want_mask.size()) return INFINITY;
    const float d = max_abs_diff(logits.data(), want_mask.data(), logits.size());
    EXPECT_LT(d, 1e-4f) << dir << " " << id;
    worst = std::max(worst, d);
    for (std::size_t m = 0; m < positions.size(); ++m) {
      std::vector<std::int64_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      const float* row = logits.data() + m * V;
      std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                        [&](std::int64_t a, std::int64_t b) { return row[a] > row[b]; });
      for (int k = 0; k < 5; ++k) EXPECT_EQ(order[k], want_topk[m * 5 + k]) << id << " mask " << m << " rank " << k;
    }
    for (auto p : positions) batch_pairs.emplace_back(samples.size(), p);
    batch_want.insert(batch_want.end(), want_mask.begin(), want_mask.end());
    samples.push_back(std::move(s));
  }

  Padded p = pad_rows(samples, model->pad_token_id());
  EXPECT_EQ(batch_pairs.size(), masks);
  std::vector<float> logits;
  model->masked_lm(p.ids.data(), p.mask.data(), types ? p.types.data() : nullptr, samples.size(), p.seq, batch_pairs,
                   logits);
  EXPECT_EQ(logits.size(), batch_want.size());
  if (logits.size() != batch_want.size()) return INFINITY;
  const float worst_batch = max_abs_diff(logits.data(), batch_want.data(), batch_want.size());
  EXPECT_LT(worst_batch, 1e-4f) << dir << " padded batch";
  return std::max(worst, worst_batch);
}

TEST(BertOracle, MaskedLmLogitsMatchHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/bert-mlm";
  EXPECT_STREQ(find_architecture(dir).name, "BertForMaskedLM");
  const float worst = check_mlm(dir, true, 8);
  std::printf("bert-mlm max |diff| vs HF (all logits, mask logits, padded batch): %.3g\n", worst);
}

// XLM-R: RoBERTa's encoder (positions from padding_idx + 1) under its own names, on the reference ids
// (its sentencepiece Unigram tokenizer is not read yet).
TEST(BertOracle, XlmRobertaQuestionAnsweringAndMaskedLmMatchHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  EXPECT_STREQ(find_architecture(data + "/oracle/xlmr-qa").name, "XLMRobertaForQuestionAnswering");
  EXPECT_STREQ(find_architecture(data + "/oracle/xlmr-mlm").name, "XLMRobertaForMaskedLM");
  const float qa = check_qa(data + "/oracle/xlmr-qa", false);
  const float mlm = check_mlm(data + "/oracle/xlmr-mlm", false, 8);
  std::printf("xlmr-qa max |diff| vs HF %.3g, xlmr-mlm %.3g\n", qa, mlm);
}

TEST(BertOracle, TypeIdsOutsideTheTableAreAnInputError) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  auto model = RobertaModel::load({data + "/oracle/bert-qa", DType::fp32, "cpu"});
  const std::vector<std::int64_t> ids{2, 103, 3}, mask{1, 1, 1}, types{0, 2, 0};
  std::vector<float> s, e;
  try {
    model->question_answering(ids.data(), mask.data(), types.data(), 1, 3, s, e);
    ADD_FAILURE() << "type id 2 accepted";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("type_vocab_size 2"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace evalrun
