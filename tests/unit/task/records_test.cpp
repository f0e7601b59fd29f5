// Every typed record (work items, shards, results: what ranks send each other and journal) survives
// write -> read with every field, and a truncated buffer is refused rather than misread.
#include <gtest/gtest.h>

#include <limits>

#include "dist/serialize.hpp"
#include "task/encoder_runner.hpp"
#include "task/generate.hpp"
#include "task/loglikelihood.hpp"
#include "task/mlm.hpp"
#include "task/perplexity.hpp"

namespace evalrun {
namespace {

// Round trip, plus: the record consumes exactly its bytes, and any shorter prefix throws.
template <class Record>
Record round_trip(const Record& r) {
  const std::string bytes = to_bytes(r);
  for (std::size_t cut : {std::size_t{0}, bytes.size() / 2, bytes.size() - 1}) {
    if (cut >= bytes.size()) continue;
    EXPECT_THROW(from_bytes<Record>(bytes.substr(0, cut)), std::runtime_error) << "cut at " << cut;
  }
  EXPECT_THROW(from_bytes<Record>(bytes + "x"), std::runtime_error);
  return from_bytes<Record>(bytes);
}

TEST(TaskRecords, EncoderItem) {
  EncoderItem a{42, {0, 5, 17, 2}, {2}, {0, 0, 1, 1}};
  const EncoderItem b = round_trip(a);
  EXPECT_EQ(b.index, 42u);
  EXPECT_EQ(b.input_ids, a.input_ids);
  EXPECT_EQ(b.mask_positions, a.mask_positions);
  EXPECT_EQ(b.type_ids, a.type_ids);
}

TEST(TaskRecords, EncoderShardOfItems) {
  std::vector<EncoderItem> items = {{3, {1, 2}, {}, {0, 1}}, {0, {}, {}, {}}, {9, {7, 8, 9}, {1, 2}, {}}};
  ByteWriter w;
  put_records(w, items);
  const std::string bytes = w.take();
  ByteReader r(bytes);
  const auto back = get_records<EncoderItem>(r);
  EXPECT_TRUE(r.done());
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].index, items[i].index);
    EXPECT_EQ(back[i].input_ids, items[i].input_ids);
    EXPECT_EQ(back[i].mask_positions, items[i].mask_positions);
    EXPECT_EQ(back[i].type_ids, items[i].type_ids);
  }
}

TEST(TaskRecords, QaItemResult) {
  QaItemResult a;
  a.index = 7;  // travels beside the record, not in it
  a.start_logits = {0.5F, -1.25F, std::numeric_limits<float>::infinity()};
  a.end_logits = {2.0F, 3.0F, -4.0F};
  a.seconds = 0.125;
  const QaItemResult b = round_trip(a);
  EXPECT_EQ(b.index, 0u);
  EXPECT_EQ(b.start_logits, a.start_logits);
  EXPECT_EQ(b.end_logits, a.end_logits);
  EXPECT_EQ(b.seconds, a.seconds);
}

TEST(TaskRecords, MlmItemScoresWithAndWithoutFullRows) {
  MlmItemScores a;
  a.seconds = 0.5;
  a.masks.push_back({MaskTopK{{4, 1}, {3.5F, 2.0F}, 4.25}, {}});
  a.masks.push_back({MaskTopK{{0}, {1.0F}, -0.5}, {0.1F, 0.2F, 0.3F}});
  const MlmItemScores b = round_trip(a);
  EXPECT_EQ(b.seconds, 0.5);
  ASSERT_EQ(b.masks.size(), 2u);
  for (std::size_t m = 0; m < 2; ++m) {
    EXPECT_EQ(b.masks[m].top.ids, a.masks[m].top.ids);
    EXPECT_EQ(b.masks[m].top.logits, a.masks[m].top.logits);
    EXPECT_EQ(b.masks[m].top.logsumexp, a.masks[m].top.logsumexp);
    EXPECT_EQ(b.masks[m].full_row, a.masks[m].full_row);
  }
}

TEST(TaskRecords, GenerationItemFreeAndForced) {
  GenerationItem free{5, "p-5 ü", {1, 300, 301}, true, std::nullopt};
  GenerationItem b = round_trip(free);
  EXPECT_EQ(b.index, 5u);
  EXPECT_EQ(b.id, "p-5 ü");
  EXPECT_EQ(b.prompt_ids, free.prompt_ids);
  EXPECT_TRUE(b.truncated);
  EXPECT_FALSE(b.forced_ids.has_value());
  GenerationItem forced{6, "", {1}, false, std::vector<std::int64_t>{9, 8, 2}};
  b = round_trip(forced);
  EXPECT_FALSE(b.truncated);
  ASSERT_TRUE(b.forced_ids.has_value());
  EXPECT_EQ(*b.forced_ids, *forced.forced_ids);
}

TEST(TaskRecords, GenerationShard) {
  GenerationShard a{{2, 128001}, 0, {{1, "a", {1, 2}, false, std::nullopt}, {4, "b", {1}, false, std::vector<std::int64_t>{3}}}};
  const GenerationShard b = round_trip(a);
  EXPECT_EQ(b.stop_ids, a.stop_ids);
  EXPECT_EQ(b.pad_id, 0);
  ASSERT_EQ(b.items.size(), 2u);
  EXPECT_EQ(b.items[1].index, 4u);
  EXPECT_EQ(b.items[1].id, "b");
  EXPECT_EQ(*b.items[1].forced_ids, std::vector<std::int64_t>{3});
}

TEST(TaskRecords, GenerationResult) {
  GenerationResult a;
  a.generated_ids = {5, 6, 2};
  a.own_ids = {5, 7, 2};
  a.stopped = true;
  a.vocab = 3;
  a.step_logits = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  a.topk_ids = {1, 0};
  a.topk_logits = {0.5F, 0.25F};
  a.prefill_seconds = 0.01;
  a.step_seconds = {0.01, 0.002, 0.003};
  a.batch_rows = 4;
  a.padded_length = 17;
  const GenerationResult b = round_trip(a);
  EXPECT_EQ(b.generated_ids, a.generated_ids);
  EXPECT_EQ(b.own_ids, a.own_ids);
  EXPECT_TRUE(b.stopped);
  EXPECT_EQ(b.vocab, 3);
  EXPECT_EQ(b.step_logits, a.step_logits);
  EXPECT_EQ(b.topk_ids, a.topk_ids);
  EXPECT_EQ(b.topk_logits, a.topk_logits);
  EXPECT_EQ(b.prefill_seconds, a.prefill_seconds);
  EXPECT_EQ(b.step_seconds, a.step_seconds);
  EXPECT_EQ(b.batch_rows, 4);
  EXPECT_EQ(b.padded_length, 17);
}

TEST(TaskRecords, PerplexityWindowStreamAndScores) {
  const PerplexityWindow w = round_trip(PerplexityWindow{3, 10, 26, 18});
  EXPECT_EQ(w.index, 3u);
  EXPECT_EQ(w.begin, 10);
  EXPECT_EQ(w.end, 26);
  EXPECT_EQ(w.score_from, 18);

  const PerplexityStream s = round_trip(PerplexityStream{{1, 2, 3, 4}, 2048});
  EXPECT_EQ(s.tokens, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.context_length, 2048);

  WindowScores a;
  a.positions = {18, 19};
  a.log_probs = {-1.5, -0.25};
  a.vocab = 2;
  a.logits = {1, 2, 3, 4};
  a.topk_ids = {1, 0};
  a.topk_logits = {4, 3};
  a.seconds = 0.75;
  const WindowScores b = round_trip(a);
  EXPECT_EQ(b.positions, a.positions);
  EXPECT_EQ(b.log_probs, a.log_probs);
  EXPECT_EQ(b.vocab, 2);
  EXPECT_EQ(b.logits, a.logits);
  EXPECT_EQ(b.topk_ids, a.topk_ids);
  EXPECT_EQ(b.topk_logits, a.topk_logits);
  EXPECT_EQ(b.seconds, 0.75);
}

TEST(TaskRecords, LoglikRequestAndScore) {
  LoglikRequest q;
  q.index = 7;
  q.input = {1, 40, 41, 42};
  q.target = {42, 43};
  q.truncated = 3;
  const LoglikRequest r = round_trip(q);
  EXPECT_EQ(r.index, 7u);
  EXPECT_EQ(r.input, q.input);
  EXPECT_EQ(r.target, q.target);
  EXPECT_EQ(r.truncated, 3);

  LoglikScore a;
  a.loglikelihood = -3.25;
  a.is_greedy = true;
  a.num_tokens = 2;
  a.seconds = 0.5;
  const LoglikScore b = round_trip(a);
  EXPECT_EQ(b.loglikelihood, -3.25);
  EXPECT_TRUE(b.is_greedy);
  EXPECT_EQ(b.num_tokens, 2);
  EXPECT_EQ(b.seconds, 0.5);
  // the journal's bytes: value, greedy flag, token count, seconds
  ByteWriter w;
  w.put<double>(-3.25);
  w.put<std::uint8_t>(1);
  w.put<std::int64_t>(2);
  w.put<double>(0.5);
  EXPECT_EQ(to_bytes(a), w.take());
}

// The layout is the one journals of earlier builds hold (the resume tests resume across a restart of
// the same build; this pins the bytes so a field reorder cannot silently misread an old journal).
TEST(TaskRecords, QaRecordLayoutIsPinned) {
  QaItemResult a;
  a.seconds = 1.0;
  a.start_logits = {2.0F};
  a.end_logits = {};
  ByteWriter w;
  w.put<double>(1.0);
  w.put_vector(std::vector<float>{2.0F});
  w.put_vector(std::vector<float>{});
  EXPECT_EQ(to_bytes(a), w.take());
}

}  // namespace
}  // namespace evalrun
