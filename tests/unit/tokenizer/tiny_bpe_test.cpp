// The built-in tiny BPE tokenizer: files in RoBERTa layout, deterministic, round-trips text and
// compresses the English it was trained on.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "test_util.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TinyBpe : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("tiny-bpe"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TinyBpe, WritesRobertaLayout) {
  write_tiny_bpe_tokenizer(dir_.string(), 1000);
  for (const char* f : {"vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / f)) << f;
  }
  EXPECT_EQ(slurp(dir_ / "merges.txt").rfind("#version: 0.2\n", 0), 0u);
  const auto cfg = nlohmann::json::parse(slurp(dir_ / "tokenizer_config.json"));
  EXPECT_EQ(cfg["tokenizer_class"], "RobertaTokenizer");
  EXPECT_EQ(cfg["model_max_length"], 512);

  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_.string());
  EXPECT_EQ(tok.vocab_size(), 1000);
  EXPECT_EQ(tok.special().bos, 0);
  EXPECT_EQ(tok.special().pad, 1);
  EXPECT_EQ(tok.special().eos, 2);
  EXPECT_EQ(tok.special().unk, 3);
  EXPECT_EQ(tok.special().mask, 999);
  EXPECT_EQ(tok.token_to_id("Ġ"), 4 + ' ');  // byte symbols follow the specials in byte order
  EXPECT_EQ(tok.token_to_id("a"), 4 + 'a');
  const auto ids = tok.encode("the <mask>.").ids;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 999), 1);
}

TEST_F(TinyBpe, DeterministicAndRoundTrips) {
  write_tiny_bpe_tokenizer(dir_.string(), 700);
  const fs::path again = dir_ / "again";
  write_tiny_bpe_tokenizer(again.string(), 700);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    EXPECT_EQ(slurp(dir_ / f), slurp(again / f)) << f;
  }
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_.string());
  const std::string texts[] = {tiny_bpe_corpus().data(), "The river flows through the city.",
                               "Zürich, 東京 and 😀 are not in the corpus; x  y\t\nz  ", ""};
  for (const auto& t : texts) {
    const Encoding e = tok.encode(t);
    for (const auto id : e.ids) EXPECT_NE(id, tok.special().unk);
    EXPECT_EQ(tok.decode(e.ids), t);
  }
}

TEST_F(TinyBpe, CommonWordsTakeFewerTokensThanBytes) {
  write_tiny_bpe_tokenizer(dir_.string(), 1000);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_.string());
  const std::string sentence = "The water of the river is the main road of the city, and the people of the city";
  const auto n = tok.encode(sentence).ids.size();
  EXPECT_LT(n * 3, sentence.size()) << n << " tokens for " << sentence.size() << " bytes";
  EXPECT_EQ(tok.encode(" the").ids.size(), 1u);
  EXPECT_EQ(tok.encode(" river").ids.size(), 1u);
}

TEST_F(TinyBpe, VocabSizeLimits) {
  EXPECT_THROW(write_tiny_bpe_tokenizer(dir_.string(), 100), InputError);
  write_tiny_bpe_tokenizer(dir_.string(), 261);  // no merges at all is allowed
  EXPECT_EQ(ByteLevelBPE::from_dir(dir_.string()).vocab_size(), 261);
  // Beyond what the corpus can give, the vocabulary stops where every corpus word is one token.
  write_tiny_bpe_tokenizer(dir_.string(), 20000);
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_.string());
  EXPECT_EQ(tok.vocab_size(), 1346);
  EXPECT_EQ(tok.special().mask, 1345);
  EXPECT_EQ(tok.encode(" Marrowford").ids.size(), 1u);
  EXPECT_EQ(tok.decode(tok.encode(std::string(tiny_bpe_corpus())).ids), tiny_bpe_corpus());
}

}  // namespace
}  // namespace evalrun
