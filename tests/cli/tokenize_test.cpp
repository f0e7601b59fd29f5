// `evalrun tokenize` as a user runs it: ids, offsets, pairs and --decode on a hand-written
// tokenizer.json; an output that is the input, and a stage evalrun lacks, are exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("evalrun-tokenize");
    write("tokenizer.json", R"({"added_tokens": [
      {"id": 0, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
      "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"},
      "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
      "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "hello": 3, "world": 4, "!": 5}}})");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string tokenize(const std::string& args) { return kBin + " tokenize --tokenizer " + dir_.string() + " " + args; }
  fs::path dir_;
};

TEST_F(TokenizeCli, IdsOffsetsPairsAndDecode) {
  const std::string in = write("in.jsonl", "\"Hello world!\"\n{\"text\": \"\"}\n");
  auto r = run_process(tokenize("--offsets " + in));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"ids\":[0,3,4,5,1],\"offsets\":[[0,0],[0,5],[6,11],[11,12],[0,0]]}\n{\"ids\":[0,1],\"offsets\":[[0,0],[0,0]]}\n");
  const std::string pairs = write("pairs.jsonl", "[\"hello\", \"world\"]\n");
  r = run_process(tokenize("--pair --no-special-tokens " + pairs));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"ids\":[3,4],\"type_ids\":[0,1]}\n");
  const std::string ids = write("ids.jsonl", "[0, 3, 4, 5, 1]\n{\"ids\": [3]}\n");
  r = run_process(tokenize("--decode " + ids));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"text\":\"hello world!\"}\n{\"text\":\"hello\"}\n");
  r = run_process("echo '\"world\"' | " + tokenize("--out " + (dir_ / "out.jsonl").string() + " -"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir_ / "out.jsonl");
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "{\"ids\":[0,4,1]}");
}

TEST_F(TokenizeCli, OutputThatIsAnInputAndUnsupportedStagesAreBadInput) {
  const std::string in = write("in.jsonl", "\"hello\"\n");
  auto r = run_process(tokenize("--out " + in + " " + in));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  r = run_process(tokenize("--out " + (dir_ / "tokenizer.json").string() + " " + in));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_process(tokenize(write("bad.jsonl", "{\"nope\": 1}\n")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:1"), std::string::npos) << r.output;
  write("tokenizer.json", R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, {"type": "Foo"}]},
                              "model": {"type": "WordLevel", "vocab": {"a": 0}}})");
  r = run_process(tokenize(in));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tokenizer.json: pre_tokenizer.pretokenizers[1].type: \"Foo\" is not supported"), std::string::npos)
      << r.output;
}

}  // namespace
