// The encoder tasks' inputs from the BERT-style fixtures' slow tokenizer files (vocab.txt +
// tokenizer_config.json, BertTokenizer / DistilBertTokenizer) against what transformers fed the model
// in oracle/bert-qa, distilbert-qa and bert-mlm: QA features (ids, token types, which tokens are
// context) and MLM features (ids, token types, mask positions).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "io/squad.hpp"
#include "io/text_dataset.hpp"
#include "task/mlm.hpp"
#include "task/qa_features.hpp"
#include "test_util.hpp"
#include "tokenizer/encoder_tokenizer.hpp"

namespace evalrun {
namespace {

void expect_qa_features_match(const std::string& dir, bool types) {
  const EncoderTokenizer tok = EncoderTokenizer::from_dir(dir);
  const bool xlmr = dir.find("xlmr") != std::string::npos;
  // [CLS] q [SEP] c [SEP], XLM-R: <s> q </s></s> c </s>
  EXPECT_EQ(tok.pair().before, std::vector<std::int64_t>({xlmr ? 0 : 2}));
  EXPECT_EQ(tok.pair().between, xlmr ? std::vector<std::int64_t>({2, 2}) : std::vector<std::int64_t>({3}));
  EXPECT_EQ(tok.pair().after, std::vector<std::int64_t>({xlmr ? 2 : 3}));
  EXPECT_EQ(tok.pair().has_types(), !xlmr);
  H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  std::vector<SquadExample> examples;
  for (const auto& id : ids) {
    SquadExample e;
    e.id = id;
    e.question = ref.attr_string("/samples/" + id, "question");
    e.context = ref.attr_string("/samples/" + id, "context");
    examples.push_back(e);
  }
  const auto features = make_qa_features(examples, tok, QaFeatureOptions{});
  ASSERT_EQ(features.size(), ids.size());  // no truncation at max_seq_length 384
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string g = "/samples/" + ids[i];
    const QaFeature& f = features[i];
    EXPECT_EQ(f.input_ids, ref.read_i64(g + "/input_ids")) << dir << " " << ids[i];
    if (types) {
      EXPECT_EQ(f.token_type_ids, ref.read_i64(g + "/token_type_ids")) << ids[i];
    }
    std::vector<std::int64_t> context;
    for (std::size_t t = 0; t < f.offsets.size(); ++t) {
      if (f.offsets[t].first >= 0) context.push_back(static_cast<std::int64_t>(t));
    }
    EXPECT_EQ(context, ref.read_i64(g + "/context_positions")) << dir << " " << ids[i];
  }
}

TEST(BertFeatures, QaFeaturesOfBertQaEqualHuggingFaceInputs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  expect_qa_features_match(data + "/oracle/bert-qa", true);
}

TEST(BertFeatures, QaFeaturesOfDistilBertQaEqualHuggingFaceInputs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  expect_qa_features_match(data + "/oracle/distilbert-qa", false);
}

TEST(BertFeatures, QaFeaturesOfXlmrQaEqualHuggingFaceInputs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  expect_qa_features_match(data + "/oracle/xlmr-qa", false);
}

std::vector<MlmFeature> expect_mlm_features_match(const std::string& dir, bool types) {
  const EncoderTokenizer tok = EncoderTokenizer::from_dir(dir);
  H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  std::vector<TextSample> samples;
  for (const auto& id : ids) {
    TextSample s;
    s.id = id;
    s.text = ref.attr_string("/samples/" + id, "text");
    samples.push_back(s);
  }
  const auto features = make_mlm_features(samples, tok, 256, dir);
  EXPECT_EQ(features.size(), ids.size());
  for (std::size_t i = 0; i < std::min(ids.size(), features.size()); ++i) {
    const std::string g = "/samples/" + ids[i];
    EXPECT_EQ(features[i].input_ids, ref.read_i64(g + "/input_ids")) << dir << " " << ids[i];
    if (types) {
      EXPECT_EQ(features[i].token_type_ids, ref.read_i64(g + "/token_type_ids")) << ids[i];
    } else {
      EXPECT_TRUE(features[i].token_type_ids.empty());
    }
    EXPECT_EQ(features[i].mask_positions, ref.read_i64(g + "/mask_positions")) << dir << " " << ids[i];
  }
  return features;
}

TEST(BertFeatures, MlmFeaturesOfBertMlmEqualHuggingFaceInputs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/bert-mlm";
  const EncoderTokenizer tok = EncoderTokenizer::from_dir(dir);
  EXPECT_EQ(tok.special().mask, 4);
  EXPECT_EQ(tok.special().pad, 0);
  const auto features = expect_mlm_features_match(dir, true);
  ASSERT_FALSE(features.empty());
  // The fill-in text is decoded with the WordPiece decoder: lower-cased words, no [CLS] / [SEP].
  const std::string filled = fill_masks(features[0], {}, tok);
  EXPECT_EQ(filled.find("[CLS]"), std::string::npos) << filled;
  EXPECT_NE(filled.find("lighthouse"), std::string::npos) << filled;
}

// XLMRobertaTokenizer: fairseq ids, <mask> = 1001 with lstrip.
TEST(BertFeatures, MlmFeaturesOfXlmrMlmEqualHuggingFaceInputs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/xlmr-mlm";
  const EncoderTokenizer tok = EncoderTokenizer::from_dir(dir);
  EXPECT_EQ(tok.special().mask, 1001);
  EXPECT_EQ(tok.special().pad, 1);
  EXPECT_EQ(tok.vocab_size(), 1002);
  const auto features = expect_mlm_features_match(dir, false);
  ASSERT_FALSE(features.empty());
  const std::string filled = fill_masks(features[0], {}, tok);
  EXPECT_EQ(filled.find("<s>"), std::string::npos) << filled;
  EXPECT_NE(filled.find("lighthouse"), std::string::npos) << filled;
}

}  // namespace
}  // namespace evalrun
