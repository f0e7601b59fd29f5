// RoBERTa against the Hugging Face reference outputs in $EVALRUN_DATA_DIR/oracle (see its README):
// roberta-qa (sharded checkpoint, 13 SQuAD features) and roberta-mlm (tied decoder, 6 samples).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "ops/gemm.hpp"
#include "model/roberta.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::string feature_name(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/features/%02d", i);
  return buf;
}

// Right-pads rows into one [n, max_len] batch with pad id 1 and mask 0.
struct Padded {
  std::vector<std::int64_t> ids, mask;
  std::int64_t seq = 0;
};
Padded pad_rows(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t pad_id) {
  Padded p;
  for (const auto& r : rows) p.seq = std::max<std::int64_t>(p.seq, r.size());
  p.ids.assign(rows.size() * p.seq, pad_id);
  p.mask.assign(rows.size() * p.seq, 0);
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (std::size_t t = 0; t < rows[b].size(); ++t) {
      p.ids[b * p.seq + t] = rows[b][t];
      p.mask[b * p.seq + t] = 1;
    }
  }
  return p;
}

TEST(RobertaOracle, QuestionAnsweringLogitsMatchHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/roberta-qa";
  auto model = RobertaModel::load({dir, DType::fp32, "cpu"});
  ASSERT_EQ(model->head(), EncoderHead::question_answering);
  EXPECT_EQ(model->config().hidden_size, 48);
  H5Reader ref(dir + "/reference.h5");
  const int n = static_cast<int>(ref.attr_int("/", "n_features"));
  ASSERT_EQ(n, 13);

  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::vector<float>> want_start, want_end;
  float worst_alone = 0;
  for (int i = 0; i < n; ++i) {
    const std::string f = feature_name(i);
    rows.push_back(ref.read_i64(f + "/input_ids"));
    want_start.push_back(ref.read_f32(f + "/start_logits"));
    want_end.push_back(ref.read_f32(f + "/end_logits"));
    const auto& ids = rows.back();
    std::vector<std::int64_t> mask = ref.read_i64(f + "/attention_mask");
    std::vector<float> start, end;
    model->question_answering(ids.data(), mask.data(), 1, ids.size(), start, end);
    ASSERT_EQ(start.size(), want_start.back().size()) << f;
    const float d = std::max(max_abs_diff(start.data(), want_start.back().data(), start.size()),
                             max_abs_diff(end.data(), want_end.back().data(), end.size()));
    EXPECT_LT(d, 1e-4f) << f;
    worst_alone = std::max(worst_alone, d);
  }
  // Spot values from the README, so a wrong reference read cannot pass silently.
  EXPECT_NEAR(want_start[0][0], 0.836203f, 1e-6f);
  EXPECT_NEAR(want_end[0][1], -0.242857f, 1e-6f);

  // All 13 features as one right-padded batch.
  Padded p = pad_rows(rows, model->config().pad_token_id);
  std::vector<float> start, end;
  model->question_answering(p.ids.data(), p.mask.data(), n, p.seq, start, end);
  float worst_batch = 0;
  for (int i = 0; i < n; ++i) {
    const std::size_t len = rows[i].size();
    worst_batch = std::max({worst_batch, max_abs_diff(start.data() + i * p.seq, want_start[i].data(), len),
                            max_abs_diff(end.data() + i * p.seq, want_end[i].data(), len)});
  }
  EXPECT_LT(worst_batch, 1e-4f);
  std::printf("roberta-qa max |diff| vs HF: alone %.3g, padded batch of 13 (seq %lld) %.3g\n", worst_alone,
              static_cast<long long>(p.seq), worst_batch);
  EXPECT_EQ(model->weights_sha256().size(), 64u);
}

TEST(RobertaOracle, MaskedLmHiddenStatesAndLogitsMatchHuggingFace) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/roberta-mlm";
  auto model = RobertaModel::load({dir, DType::fp32, "cpu"});
  ASSERT_EQ(model->head(), EncoderHead::masked_lm);
  const std::int64_t H = model->config().hidden_size, V = model->config().vocab_size;
  H5Reader ref(dir + "/reference.h5");
  const auto ids_list = ref.read_strings("/ids");
  ASSERT_EQ(ids_list.size(), 6u);

  float worst_hidden = 0, worst_logits = 0;
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::vector<std::int64_t>> all_positions;
  std::vector<std::vector<float>> all_want;
  for (const auto& id : ids_list) {
    const std::string g = "/samples/" + id;
    const auto ids = ref.read_i64(g + "/input_ids");
    const auto mask = ref.read_i64(g + "/attention_mask");
    const auto positions = ref.read_i64(g + "/mask_positions");
    const auto want_hidden = ref.read_f32(g + "/hidden_states");
    const auto want_logits = ref.read_f32(g + "/mask_logits");
    const auto want_topk = ref.read_i64(g + "/topk_ids");
    const std::int64_t L = ids.size();

    const auto hidden = model->hidden_states(ids.data(), mask.data(), 1, L);
    ASSERT_EQ(hidden.size(), 3u);
    ASSERT_EQ(want_hidden.size(), static_cast<std::size_t>(3 * L * H));
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(hidden[k].size(), static_cast<std::size_t>(L * H));
      const float d = max_abs_diff(hidden[k].data(), want_hidden.data() + k * L * H, L * H);
      EXPECT_LT(d, 1e-4f) << id << " hidden state " << k;
      worst_hidden = std::max(worst_hidden, d);
    }

    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (auto p : positions) pairs.emplace_back(0, p);
    std::vector<float> logits;
    model->masked_lm(ids.data(), mask.data(), 1, L, pairs, logits);
    ASSERT_EQ(logits.size(), want_logits.size()) << id;
    const float d = max_abs_diff(logits.data(), want_logits.data(), logits.size());
    EXPECT_LT(d, 1e-4f) << id;
    worst_logits = std::max(worst_logits, d);
    for (std::size_t m = 0; m < positions.size(); ++m) {
      std::vector<std::int64_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      const float* row = logits.data() + m * V;
      std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                        [&](std::int64_t a, std::int64_t b) { return row[a] > row[b]; });
      for (int k = 0; k < 5; ++k) EXPECT_EQ(order[k], want_topk[m * 5 + k]) << id << " mask " << m << " rank " << k;
    }
    rows.push_back(ids);
    all_positions.push_back(positions);
    all_want.push_back(want_logits);
  }

  // The six samples as one right-padded batch, logits at all seven masks.
  Padded p = pad_rows(rows, model->config().pad_token_id);
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  std::vector<float> want;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (auto pos : all_positions[b]) pairs.emplace_back(b, pos);
    want.insert(want.end(), all_want[b].begin(), all_want[b].end());
  }
  ASSERT_EQ(pairs.size(), 7u);
  std::vector<float> logits;
  model->masked_lm(p.ids.data(), p.mask.data(), rows.size(), p.seq, pairs, logits);
  ASSERT_EQ(logits.size(), want.size());
  const float worst_batch = max_abs_diff(logits.data(), want.data(), want.size());
  EXPECT_LT(worst_batch, 1e-4f);
  std::printf("roberta-mlm max |diff| vs HF: hidden states %.3g, mask logits alone %.3g, padded batch %.3g\n",
              worst_hidden, worst_logits, worst_batch);

  // The torch fallback path (no oneDNN sgemm; head_dim 16 folds the attention scale into the query
  // weights) and bfloat16 on the same padded batch.
  ops::set_onednn_sgemm_enabled(false);
  auto slow = RobertaModel::load({dir, DType::fp32, "cpu"});
  ops::set_onednn_sgemm_enabled(true);
  slow->masked_lm(p.ids.data(), p.mask.data(), rows.size(), p.seq, pairs, logits);
  const float worst_slow = max_abs_diff(logits.data(), want.data(), want.size());
  EXPECT_LT(worst_slow, 1e-4f);
  auto bf16 = RobertaModel::load({dir, DType::bf16, "cpu"});
  bf16->masked_lm(p.ids.data(), p.mask.data(), rows.size(), p.seq, pairs, logits);
  const float worst_bf16 = max_abs_diff(logits.data(), want.data(), want.size());
  // |logits| <= 9.2; bfloat16 keeps 8 bits of mantissa: 0.22 on a CPU with AVX512-BF16, 0.65 on an
  // AVX2-only one (AMD EPYC), where oneDNN emulates the bfloat16 products and rounds more often.
  EXPECT_LT(worst_bf16, 1.0f);
  std::printf("roberta-mlm padded batch: torch fallback path %.3g, bf16 %.3g\n", worst_slow, worst_bf16);
}

}  // namespace
}  // namespace evalrun
