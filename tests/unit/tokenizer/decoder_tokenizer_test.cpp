// DecoderTokenizer: special-id resolution from the checkpoint's JSON files (on the built-in tiny
// byte-level BPE, no shared data needed) and the sentencepiece path against stories260K and the
// llama-gptq and gemma oracles (Hugging Face's slow LlamaTokenizer / GemmaTokenizer ids and decoded texts).
#include "tokenizer/decoder_tokenizer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "common/text.hpp"
#include "io/hdf5_file.hpp"
#include "test_util.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A tiny byte-level BPE directory (<s>=0, <pad>=1, </s>=2, <unk>=3) whose JSON files each test rewrites.
class BpeDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("evalrun-dectok");
    write_tiny_bpe_tokenizer(dir_.string(), 400);
    fs::remove(dir_ / "special_tokens_map.json");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(BpeDir, GenerationConfigEosListGivesAllStopIdsAndPadTokenWins) {
  write(dir_ / "tokenizer_config.json",
        R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true}, "pad_token": "<pad>",
            "unk_token": "<unk>", "add_bos_token": true})");
  write(dir_ / "generation_config.json", R"({"bos_token_id": 0, "eos_token_id": [2, 7]})");
  const auto t = DecoderTokenizer::from_dir(dir_.string());
  EXPECT_EQ(t.kind(), "byte-level-bpe");
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.stop_ids(), (Ids{2, 7}));
  EXPECT_EQ(t.pad_id(), 1);
  EXPECT_TRUE(t.adds_bos());
  const Ids ids = t.encode("the cat");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(t.encode_without_bos("the cat"), Ids(ids.begin() + 1, ids.end()));
  EXPECT_TRUE(t.is_special(7));  // a stop id is special for decoding
  EXPECT_FALSE(t.sha256().empty());
}

TEST_F(BpeDir, ATokenizerClassThatReadsTheseFilesItsOwnWayIsRefused) {
  for (const char* name : {"GPT2Tokenizer", "GPT2TokenizerFast", "RobertaTokenizer"}) {
    write(dir_ / "tokenizer_config.json", std::string(R"({"tokenizer_class": ")") + name + "\"}");
    EXPECT_EQ(DecoderTokenizer::from_dir(dir_.string()).kind(), "byte-level-bpe") << name;
  }
  // CodeGenTokenizer reads the same vocab.json + merges.txt with other rules (and no converter row).
  write(dir_ / "tokenizer_config.json", R"({"tokenizer_class": "CodeGenTokenizer"})");
  try {
    DecoderTokenizer::from_dir(dir_.string());
    FAIL() << "CodeGenTokenizer accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), (dir_ / "tokenizer_config.json").string() + ": tokenizer_class");
    EXPECT_NE(std::string(e.what()).find("'CodeGenTokenizer' is not supported for a byte-level-bpe tokenizer without "
                                         "tokenizer.json (supported: GPT2Tokenizer, RobertaTokenizer)"),
              std::string::npos)
        << e.what();
  }
  // Qwen2Tokenizer is read through transformers' conversion of the same files.
  write(dir_ / "tokenizer_config.json", R"({"tokenizer_class": "Qwen2Tokenizer"})");
  EXPECT_EQ(DecoderTokenizer::from_dir(dir_.string()).kind(), "tokenizer.json");
}

TEST_F(BpeDir, PadFallsBackToFirstEosNotZero) {
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "pad_token": null})");
  write(dir_ / "generation_config.json", R"({"eos_token_id": [5, 2]})");
  const auto t = DecoderTokenizer::from_dir(dir_.string());
  EXPECT_EQ(t.stop_ids(), (Ids{5, 2}));
  EXPECT_EQ(t.pad_id(), 5);
  EXPECT_EQ(t.eos_id(), 2);  // the tokenizer's own eos
}

TEST_F(BpeDir, ConfigJsonIsTheLastResort) {
  write(dir_ / "tokenizer_config.json", R"({"add_bos_token": true})");
  write(dir_ / "config.json", R"({"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": null})");
  const auto t = DecoderTokenizer::from_dir(dir_.string());
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.stop_ids(), (Ids{2}));
  EXPECT_EQ(t.pad_id(), 2);
}

TEST_F(BpeDir, NoBosWhenBosEqualsEosOrAddBosFalse) {
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "</s>", "eos_token": "</s>", "add_bos_token": true})");
  auto t = DecoderTokenizer::from_dir(dir_.string());
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_FALSE(t.adds_bos());
  EXPECT_EQ(t.encode("the cat"), t.encode_without_bos("the cat"));

  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false})");
  t = DecoderTokenizer::from_dir(dir_.string());
  EXPECT_FALSE(t.adds_bos());
  EXPECT_NE(t.encode("the cat").front(), 0);
}

TEST_F(BpeDir, DecodeSkipsSpecialTokensOnRequest) {
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  const auto t = DecoderTokenizer::from_dir(dir_.string());
  Ids ids = t.encode("the cat");
  ids.push_back(2);
  EXPECT_EQ(t.decode(ids, true), "the cat");
  EXPECT_EQ(t.decode(ids, false), "<s>the cat</s>");
}

TEST_F(BpeDir, ErrorsNameTheFileAndKey) {
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<nope>"})");
  try {
    DecoderTokenizer::from_dir(dir_.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: bos_token"), std::string::npos) << e.what();
  }
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  write(dir_ / "generation_config.json", R"({"eos_token_id": "two"})");
  try {
    DecoderTokenizer::from_dir(dir_.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: eos_token_id"), std::string::npos) << e.what();
  }
  write(dir_ / "generation_config.json", "{ not json");
  EXPECT_THROW(DecoderTokenizer::from_dir(dir_.string()), InputError);
  EXPECT_THROW(DecoderTokenizer::from_dir((dir_ / "missing").string()), InputError);
  const auto empty = testing::make_temp_dir("evalrun-dectok-empty");
  EXPECT_THROW(DecoderTokenizer::from_dir(empty.string()), InputError);
  fs::remove_all(empty);
}

TEST_F(BpeDir, MistypedSpecialFlagAndHugeNumberAreInputErrors) {
  // nlohmann's value("special", false) threw type_error on a non-boolean (found by fuzz_sentencepiece).
  write(dir_ / "tokenizer_config.json", R"({"added_tokens_decoder": {"0": {"content": "<s>", "special": 3}}})");
  EXPECT_THROW(DecoderTokenizer::from_dir(dir_.string()), InputError);
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  write(dir_ / "generation_config.json", R"({"eos_token_id": 1e400})");  // out_of_range, not parse_error
  EXPECT_THROW(DecoderTokenizer::from_dir(dir_.string()), InputError);
}

// The 512-piece stories260K sentencepiece model, committed as a fuzz seed (fuzz/data/tok512.model).
TEST(DecoderTokenizerSentencepiece, StopIdPastTheModelDecodesToNothing) {
  const auto dir = testing::make_temp_dir("evalrun-dectok-spm");
  fs::copy_file(EVALRUN_TOK512_MODEL, dir / "tokenizer.model");
  // A padded model vocabulary: a stop id past the 512 pieces. decode() read past the piece table
  // (SEGV under ASan, reproduced by fuzz_sentencepiece).
  write(dir / "generation_config.json", R"({"eos_token_id": [2, 100000]})");
  const auto t = DecoderTokenizer::from_dir(dir.string());
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.stop_ids(), (Ids{2, 100000}));
  const Ids ids = t.encode_without_bos("Once upon a time");
  Ids with_stop = ids;
  with_stop.push_back(100000);
  EXPECT_EQ(t.decode(with_stop, false), t.decode(ids, false));
  EXPECT_EQ(t.decode(with_stop, true), "Once upon a time");
  fs::remove_all(dir);
}

TEST(DecoderTokenizerSentencepiece, OnlyLlamaAndGemmaTokenizerReadATokenizerModel) {
  const auto dir = testing::make_temp_dir("evalrun-dectok-spm-class");
  fs::copy_file(EVALRUN_TOK512_MODEL, dir / "tokenizer.model");
  for (const char* cls : {"LlamaTokenizerFast", "GemmaTokenizer"}) {
    write(dir / "tokenizer_config.json", std::string(R"({"tokenizer_class": ")") + cls + "\"}");
    EXPECT_EQ(DecoderTokenizer::from_dir(dir.string()).kind(), "sentencepiece") << cls;
  }
  write(dir / "tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  try {
    DecoderTokenizer::from_dir(dir.string());
    ADD_FAILURE() << "T5Tokenizer was read as LlamaTokenizer";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer_config.json: tokenizer_class"), std::string::npos) << what;
    EXPECT_NE(what.find("(supported: LlamaTokenizer, GemmaTokenizer)"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(DecoderTokenizerStories, EncodesLikeLlamaTokenizerAndDecodesTheReadmeText) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto t = DecoderTokenizer::from_dir(data + "/models/stories260K");
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.encode("Once upon a time"), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.stop_ids(), (Ids{2}));
  EXPECT_EQ(t.pad_id(), 2);  // no pad token: the first eos, as transformers' generate
  EXPECT_EQ(t.unk_id(), 0);
  // Special-token text in a prompt becomes the token, as the slow tokenizer splits it out.
  EXPECT_EQ(t.encode_without_bos("Once</s>"), (Ids{403, 2}));

  Ids ids = {1, 403, 407, 261, 378};
  const Ids readme = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410,
                      408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370,
                      432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286,
                      267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336, 432, 313, 438, 310,
                      432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 317, 286, 296,
                      418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400};
  ids.insert(ids.end(), readme.begin(), readme.end());
  EXPECT_EQ(t.decode(ids, true),
            "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One "
            "day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, "
            "\"Lily, let's go to the park.\" Lily was sad and didn't know what to do");
  // Without skipping, BOS is written as its text (LlamaTokenizer).
  EXPECT_EQ(t.decode({1, 403, 407}, false), "<s>Once upon");
}

// A directory with a tokenizer.json (and a tokenizer.model beside it): the tokenizer.json pipeline
// wins, as transformers' AutoTokenizer loads the fast tokenizer; BOS as its post-processor says.
TEST(DecoderTokenizerJson, TokenizerJsonWinsAndItsTemplateDecidesBos) {
  const fs::path dir = testing::make_temp_dir("evalrun-dectok-json");
  fs::copy_file(EVALRUN_TOK512_MODEL, dir / "tokenizer.model");
  auto tokenizer_json = [](bool template_bos) {
    const std::string post = template_bos ? R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})" : "null";
    return R"({"added_tokens": [
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
      "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": )" + post + R"(,
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
      "model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}}})";
  };
  write(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false})");
  write(dir / "tokenizer.json", tokenizer_json(true));
  auto t = DecoderTokenizer::from_dir(dir.string());
  EXPECT_EQ(t.kind(), "tokenizer.json");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.adds_bos());  // the template adds it, add_bos_token notwithstanding
  EXPECT_EQ(t.encode("hello world</s>"), (Ids{1, 3, 4, 2}));
  EXPECT_EQ(t.encode_without_bos("hello  world"), (Ids{3, 4}));
  EXPECT_EQ(t.decode({1, 3, 4, 2}, true), "hello world");
  EXPECT_EQ(t.vocab_size(), 5);
  write(dir / "tokenizer.json", tokenizer_json(false));
  write(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})");
  t = DecoderTokenizer::from_dir(dir.string());
  EXPECT_FALSE(t.adds_bos());  // no post-processor: no BOS, as the fast tokenizer
  EXPECT_EQ(t.encode("hello"), (Ids{3}));
  write(dir / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_THROW(DecoderTokenizer::from_dir(dir.string()), InputError);
  fs::remove_all(dir);
}

// Qwen2Tokenizer (vocab.json + merges.txt) through the Qwen2 conversion: Hugging Face's slow ids.
// The same files read as GPT-2's byte-level BPE give other ids for a prompt with digits.
TEST(DecoderTokenizerOracle, Qwen2PromptsAndGeneratedTexts) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/qwen2";
  const auto t = DecoderTokenizer::from_dir(dir);
  EXPECT_EQ(t.bos_id(), -1);
  EXPECT_FALSE(t.adds_bos());
  const auto gpt2 = ByteLevelBPE::from_files(dir + "/vocab.json", dir + "/merges.txt");
  const H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  ASSERT_EQ(ids.size(), 6u);
  int gpt2_differs = 0;
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    const std::string prompt = ref.attr_string(g, "prompt");
    EXPECT_EQ(t.encode(prompt), ref.read_i64(g + "/input_ids")) << id;
    gpt2_differs += gpt2.encode(prompt).ids != ref.read_i64(g + "/input_ids");
    EXPECT_EQ(t.decode(ref.read_i64(g + "/generated_ids"), true), ref.attr_string(g, "text")) << id;
    EXPECT_EQ(t.decode(ref.read_i64(g + "/sequence_ids"), true), ref.attr_string(g, "full_text")) << id;
  }
  EXPECT_GE(gpt2_differs, 1) << "the conversion is not what tells these ids apart";
}

// GemmaTokenizer (slow, tokenizer.model): [BOS] + sentencepiece's ids, as Hugging Face gave them on
// the oracle/gemma prompts (leading spaces, a tab, a newline, CJK and accents among them), and the
// generated texts. Unlike LlamaTokenizer (legacy) it writes no space before a special token.
TEST(DecoderTokenizerOracle, GemmaPromptsAndGeneratedTexts) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/gemma";
  const auto t = DecoderTokenizer::from_dir(dir);
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_TRUE(t.adds_bos());
  const H5Reader ref(dir + "/reference.h5");
  EXPECT_EQ(ref.attr_string("/", "tokenizer_class"), "GemmaTokenizer");
  const auto ids = ref.read_strings("/ids");
  ASSERT_EQ(ids.size(), 6u);
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    const std::string prompt = ref.attr_string(g, "prompt");
    EXPECT_EQ(t.encode(prompt), ref.read_i64(g + "/input_ids")) << id;
    EXPECT_EQ(t.decode(ref.read_i64(g + "/generated_ids"), true), ref.attr_string(g, "text")) << id;
    EXPECT_EQ(t.decode(ref.read_i64(g + "/sequence_ids"), true), ref.attr_string(g, "full_text")) << id;
  }
  // Special tokens kept: GemmaTokenizer._decode joins them to the text; LlamaTokenizer (the same
  // files with its class, legacy) writes a space when a special token follows text, ahead of that
  // text's pieces (convert_tokens_to_string's order).
  const Ids once = t.encode_without_bos("Once upon a time");
  Ids with_specials{1};
  with_specials.insert(with_specials.end(), once.begin(), once.end());
  with_specials.push_back(2);
  EXPECT_EQ(t.decode(with_specials, false), "<s>Once upon a time</s>");
  const fs::path as_llama = testing::make_temp_dir("evalrun-dectok-gemma-as-llama");
  for (const char* f : {"tokenizer.model", "special_tokens_map.json"}) fs::copy_file(fs::path(dir) / f, as_llama / f);
  std::string config = read_file(dir + "/tokenizer_config.json");
  const std::string cls = "\"GemmaTokenizer\"";
  config.replace(config.find(cls), cls.size(), "\"LlamaTokenizer\"");
  write(as_llama / "tokenizer_config.json", config);
  const auto llama = DecoderTokenizer::from_dir(as_llama.string());
  EXPECT_EQ(llama.encode("Once upon a time"), t.encode("Once upon a time"));
  EXPECT_EQ(llama.decode(with_specials, false), "<s> Once upon a time</s>");
  fs::remove_all(as_llama);
}

TEST(DecoderTokenizerOracle, LlamaGptqPromptsAndGeneratedTexts) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string dir = data + "/oracle/llama-gptq";
  const auto t = DecoderTokenizer::from_dir(dir);
  const H5Reader ref(dir + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  ASSERT_EQ(ids.size(), 6u);
  for (const auto& id : ids) {
    const std::string g = "/samples/" + id;
    const std::string prompt = ref.attr_string(g, "prompt");
    EXPECT_EQ(t.encode(prompt), ref.read_i64(g + "/input_ids")) << id;
    EXPECT_EQ(t.decode(ref.read_i64(g + "/generated_ids"), true), ref.attr_string(g, "text")) << id;
    EXPECT_EQ(t.decode(ref.read_i64(g + "/sequence_ids"), true), ref.attr_string(g, "full_text")) << id;
  }
}

}  // namespace
}  // namespace evalrun
