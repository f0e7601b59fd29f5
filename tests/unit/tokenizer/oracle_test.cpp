// ByteLevelBPE against the Hugging Face references in oracle/ (ids of the slow tokenizer, offsets of
// the fast one) and over the whole SQuAD v1.1 dev set (round trip and speed).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "io/hdf5_file.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

using Ids = std::vector<std::int64_t>;

// Code points of a UTF-8 string (for offset bounds).
int count_code_points(const std::string& s) {
  int n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

TEST(TokenizerOracle, RobertaQaQuestionAndContextIdsAndOffsets) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/roberta-qa";
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir);
  EXPECT_EQ(tok.special().mask, 50264);
  const H5Reader ref(dir + "/reference.h5");
  const auto example_ids = ref.read_strings("/example_ids");
  ASSERT_EQ(example_ids.size(), 8u);
  std::size_t checked_features = 0;
  for (const auto& id : example_ids) {
    const std::string g = "/examples/" + id;
    const std::string question = ref.attr_string(g, "question_stripped");
    const std::string context = ref.attr_string(g, "context");
    const Encoding q = tok.encode(question);
    const Encoding c = tok.encode(context);
    EXPECT_EQ(q.ids, ref.read_i64(g + "/question_ids")) << id;
    EXPECT_EQ(c.ids, ref.read_i64(g + "/context_ids")) << id;
    const Ids offsets = ref.read_i64(g + "/context_offsets");
    ASSERT_EQ(offsets.size(), 2 * c.offsets.size()) << id;
    for (std::size_t t = 0; t < c.offsets.size(); ++t) {
      EXPECT_EQ(c.offsets[t].first, offsets[2 * t]) << id << " token " << t;
      EXPECT_EQ(c.offsets[t].second, offsets[2 * t + 1]) << id << " token " << t;
    }
    // The features are <s> q </s> </s> c[a:b] </s>: a cross-check of the window bookkeeping.
    for (const std::int64_t f : ref.read_i64(g + "/feature_indices")) {
      char name[8];
      std::snprintf(name, sizeof name, "%02d", static_cast<int>(f));
      const std::string fg = std::string("/features/") + name;
      const auto a = ref.attr_int(fg, "context_token_start");
      const auto b = ref.attr_int(fg, "context_token_stop");
      Ids expect = {tok.special().bos};
      expect.insert(expect.end(), q.ids.begin(), q.ids.end());
      expect.push_back(tok.special().eos);
      expect.push_back(tok.special().eos);
      expect.insert(expect.end(), c.ids.begin() + a, c.ids.begin() + b);
      expect.push_back(tok.special().eos);
      EXPECT_EQ(expect, ref.read_i64(fg + "/input_ids")) << fg;
      ++checked_features;
    }
  }
  EXPECT_EQ(checked_features, 13u);
}

TEST(TokenizerOracle, RobertaMlmInputIds) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/roberta-mlm";
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir);
  const H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  ASSERT_EQ(ids.size(), 6u);
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    const Encoding e = tok.encode(ref.attr_string(g, "text"));
    Ids expect = {tok.special().bos};
    expect.insert(expect.end(), e.ids.begin(), e.ids.end());
    expect.push_back(tok.special().eos);
    EXPECT_EQ(expect, ref.read_i64(g + "/input_ids")) << id;
    // The mask positions are where the <mask> ids are.
    Ids positions;
    for (std::size_t i = 0; i < expect.size(); ++i) {
      if (expect[i] == tok.special().mask) positions.push_back(static_cast<std::int64_t>(i));
    }
    EXPECT_EQ(positions, ref.read_i64(g + "/mask_positions")) << id;
  }
}

// decode(encode(x)) == x over every SQuAD dev context, offsets stay inside the text, and the whole
// set (2,067 contexts + 10,570 questions) tokenizes in a couple of seconds.
TEST(TokenizerOracle, SquadDevRoundTripAndSpeed) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(data + "/tokenizers/roberta-base");
  std::ifstream in(data + "/squad/dev-v1.1.json");
  const nlohmann::json squad = nlohmann::json::parse(in);
  std::vector<std::string> contexts, questions;
  for (const auto& article : squad["data"]) {
    for (const auto& para : article["paragraphs"]) {
      contexts.push_back(para["context"].get<std::string>());
      for (const auto& qa : para["qas"]) questions.push_back(qa["question"].get<std::string>());
    }
  }
  ASSERT_EQ(contexts.size(), 2067u);
  ASSERT_EQ(questions.size(), 10570u);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Encoding> encoded;
  encoded.reserve(contexts.size());
  std::size_t n_tokens = 0;
  for (const auto& c : contexts) {
    encoded.push_back(tok.encode(c));
    n_tokens += encoded.back().ids.size();
  }
  for (const auto& q : questions) n_tokens += tok.encode(q).ids.size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ speed    ] SQuAD dev: " << contexts.size() << " contexts + " << questions.size() << " questions, "
            << n_tokens << " tokens in " << seconds << " s\n";
  RecordProperty("squad_dev_encode_seconds", std::to_string(seconds));
  EXPECT_LT(seconds, 10.0);  // a couple of seconds is the target; generous for a loaded CI machine

  for (std::size_t i = 0; i < contexts.size(); ++i) {
    const Encoding& e = encoded[i];
    ASSERT_EQ(tok.decode(e.ids), contexts[i]) << "context " << i;
    const int n = count_code_points(contexts[i]);
    for (const auto& [s, t] : e.offsets) {
      ASSERT_TRUE(0 <= s && s <= t && t <= n) << "context " << i << " span [" << s << ", " << t << ")";
    }
  }
}

}  // namespace
}  // namespace evalrun
