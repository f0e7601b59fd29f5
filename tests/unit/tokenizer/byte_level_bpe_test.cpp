// ByteLevelBPE against the roberta-base files: ids as Hugging Face's slow RobertaTokenizer gives them,
// offsets as the fast tokenizer reports them, decoding, tokenizer.json, and input errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int64_t>;
using Spans = std::vector<std::pair<int, int>>;

std::string roberta_dir(const std::string& data) { return data + "/tokenizers/roberta-base"; }

const ByteLevelBPE& roberta(const std::string& data) {
  static const ByteLevelBPE tok = ByteLevelBPE::from_dir(roberta_dir(data));
  return tok;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ByteLevelBpe, HelloWorldAsDocumented) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto& tok = roberta(data);
  const Encoding e = tok.encode("Hello world");
  EXPECT_EQ(e.ids, (Ids{31414, 232}));
  EXPECT_EQ(e.offsets, (Spans{{0, 5}, {6, 11}}));
  EXPECT_EQ(tok.special().bos, 0);
  EXPECT_EQ(tok.special().pad, 1);
  EXPECT_EQ(tok.special().eos, 2);
  EXPECT_EQ(tok.special().unk, 3);
  EXPECT_EQ(tok.special().mask, 50264);
  EXPECT_EQ(tok.vocab_size(), 50265);
  EXPECT_EQ(tok.token_to_id("Ġworld"), 232);
  EXPECT_EQ(tok.id_to_token(31414), "Hello");
  EXPECT_EQ(tok.token_to_id("no-such-token-xyz"), -1);
  EXPECT_EQ(tok.sha256().size(), 64u);
}

// Expected ids below were produced by Hugging Face's slow-tokenizer algorithm (GPT-2 regex with the
// `regex` module, bytes_to_unicode, rank-ordered merges) on the same vocab.json/merges.txt.
struct Case {
  const char* text;
  Ids ids;
  Spans offsets;
};

TEST(ByteLevelBpe, UnicodeWhitespaceDigitsContractions) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto& tok = roberta(data);
  const Case cases[] = {
      // é is 2 bytes merged with "caf"; Đ (2 bytes) splits into 2 tokens sharing its span; ẵ (3 bytes) too.
      {"café Đà Nẵng",
       {438, 2001, 1140, 4236, 16948, 5269, 234, 1376, 3070, 8906, 2590},
       {{0, 1}, {1, 3}, {3, 4}, {5, 6}, {5, 6}, {6, 7}, {8, 9}, {9, 10}, {9, 10}, {9, 10}, {10, 12}}},
      {"I love 🤗 and 😀!",
       {100, 657, 8103, 10470, 6800, 8, 17841, 7471, 328},
       {{0, 1}, {2, 6}, {7, 8}, {7, 8}, {7, 8}, {9, 12}, {13, 14}, {13, 14}, {14, 15}}},
      {"東京タワー", {48414, 15389, 46499, 11582, 49343, 49770, 48438}, {{0, 1}, {0, 1}, {1, 2}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}},
      // A double space: the first space is a token of its own with an empty span.
      {"a  b", {102, 1437, 741}, {{0, 1}, {2, 2}, {3, 4}}},
      {"  leading", {1437, 981}, {{1, 1}, {2, 9}}},
      {"trailing  ", {9738, 7022, 1437, 1437}, {{0, 3}, {3, 8}, {9, 9}, {10, 10}}},
      {"tab\there", {34108, 50117, 10859}, {{0, 3}, {3, 4}, {4, 8}}},
      {"line\nbreak\n\n", {1902, 50118, 10339, 50140}, {{0, 4}, {4, 5}, {5, 10}, {10, 12}}},
      {"I'm sure it's 42, they'll've",
       {100, 437, 686, 24, 18, 3330, 6, 51, 581, 348},
       {{0, 1}, {1, 3}, {4, 8}, {9, 11}, {11, 13}, {14, 16}, {16, 17}, {18, 22}, {22, 25}, {25, 28}}},
      {"In 2019: 1,234,567 visitors",
       {1121, 954, 35, 112, 6, 28621, 6, 245, 4111, 3074},
       {{0, 2}, {3, 7}, {7, 8}, {9, 10}, {10, 11}, {11, 14}, {14, 15}, {15, 16}, {16, 18}, {19, 27}}},
      // Contractions are case-sensitive: 'T is punctuation + letter.
      {"don't DON'T", {7254, 75, 24980, 108, 565}, {{0, 3}, {3, 5}, {6, 9}, {9, 10}, {10, 11}}},
      {" ", {1437}, {{1, 1}}},
      {"", {}, {}},
  };
  for (const Case& c : cases) {
    const Encoding e = tok.encode(c.text);
    EXPECT_EQ(e.ids, c.ids) << c.text;
    EXPECT_EQ(e.offsets, c.offsets) << c.text;
    EXPECT_EQ(tok.decode(e.ids), c.text);
  }
}

TEST(ByteLevelBpe, SpecialTokensInText) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto& tok = roberta(data);
  // <mask> absorbs the whitespace before it (lstrip); its span is the "<mask>" text.
  Encoding e = tok.encode("Paris is the <mask> of France.");
  EXPECT_EQ(e.ids, (Ids{32826, 16, 5, 50264, 9, 1470, 4}));
  EXPECT_EQ(e.offsets[3], (std::pair<int, int>{13, 19}));
  e = tok.encode("and<mask>.");
  EXPECT_EQ(e.ids, (Ids{463, 50264, 4}));
  e = tok.encode("a \n<mask>");  // Python str.rstrip(): newlines go too
  EXPECT_EQ(e.ids, (Ids{102, 50264}));
  EXPECT_EQ(e.offsets, (Spans{{0, 1}, {3, 9}}));
  // Other special tokens keep the spaces around them.
  e = tok.encode("<s>x </s>");
  EXPECT_EQ(e.ids, (Ids{0, 1178, 1437, 2}));
  EXPECT_EQ(e.offsets, (Spans{{0, 3}, {3, 4}, {5, 5}, {5, 9}}));
  EXPECT_EQ(tok.decode(e.ids), "<s>x </s>");
  EXPECT_EQ(tok.decode(e.ids, /*skip_special_tokens=*/true), "x ");
}

TEST(ByteLevelBpe, DecodeReplacesBrokenUtf8) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto& tok = roberta(data);
  // The first of Đ's two tokens alone is a truncated sequence -> one U+FFFD, as errors="replace".
  const Encoding e = tok.encode("Đ");
  ASSERT_EQ(e.ids.size(), 2u);
  EXPECT_EQ(tok.decode({e.ids[0]}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode({e.ids[0], 232}), "\xEF\xBF\xBD world");
  EXPECT_EQ(tok.decode(e.ids), "Đ");
  EXPECT_THROW(tok.decode({50265}), InputError);
  EXPECT_THROW(tok.decode({-1}), InputError);
}

// tokenizer.json (model.type BPE) built from vocab.json + merges.txt gives identical ids, with the
// merges either as "a b" strings or as [a, b] pairs.
TEST(ByteLevelBpe, TokenizerJsonMatchesVocabAndMerges) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto& ref = roberta(data);
  const nlohmann::json vocab = nlohmann::json::parse(slurp(roberta_dir(data) + "/vocab.json"));
  nlohmann::json merges_str = nlohmann::json::array();
  nlohmann::json merges_pair = nlohmann::json::array();
  {
    std::ifstream in(roberta_dir(data) + "/merges.txt");
    std::string line;
    std::getline(in, line);  // #version
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto sp = line.find(' ');
      merges_str.push_back(line);
      merges_pair.push_back({line.substr(0, sp), line.substr(sp + 1)});
    }
  }
  const std::string texts[] = {"Hello world", "Paris is the <mask> of France.", "café Đà Nẵng 😀",
                               "  x\n\n y  ", "It's 1,234 o'clock; they'd've gone."};
  for (const auto* merges : {&merges_str, &merges_pair}) {
    nlohmann::json tj;
    tj["version"] = "1.0";
    tj["added_tokens"] = nlohmann::json::array();
    const std::pair<int, const char*> specials[] = {{0, "<s>"}, {1, "<pad>"}, {2, "</s>"}, {3, "<unk>"}, {50264, "<mask>"}};
    for (const auto& [id, content] : specials) {
      tj["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false},
                                    {"lstrip", std::string(content) == "<mask>"}, {"rstrip", false},
                                    {"normalized", false}, {"special", true}});
    }
    tj["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
    tj["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", *merges}};
    const fs::path dir = testing::make_temp_dir("tok-json");
    write(dir / "tokenizer.json", tj.dump());
    const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir.string());
    EXPECT_EQ(tok.vocab_size(), ref.vocab_size());
    EXPECT_EQ(tok.special().mask, 50264);
    for (const auto& t : texts) {
      const Encoding a = tok.encode(t);
      const Encoding b = ref.encode(t);
      EXPECT_EQ(a.ids, b.ids) << t;
      EXPECT_EQ(a.offsets, b.offsets) << t;
    }
    fs::remove_all(dir);
  }
}

// A tokenizer.json whose pre-tokenization is not GPT-2's (Llama 3's Split pattern, a prefix space, a
// normalizer) would give other ids: refused, naming the field.
TEST(ByteLevelBpe, TokenizerJsonWithOtherPreTokenizationIsRefused) {
  nlohmann::json base;
  base["model"] = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", nlohmann::json::array()}};
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* where;
  };
  const Case cases[] = {
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}}, "pre_tokenizer"},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", true}}, "pre_tokenizer.add_prefix_space"},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", false}}, "pre_tokenizer.use_regex"},
      {"normalizer", {{"type", "NFC"}}, "normalizer"},
  };
  for (const auto& c : cases) {
    nlohmann::json tj = base;
    tj[c.field] = c.value;
    const fs::path dir = testing::make_temp_dir("tok-pre");
    write(dir / "tokenizer.json", tj.dump());
    try {
      ByteLevelBPE::from_dir(dir.string());
      ADD_FAILURE() << "accepted " << c.value.dump();
    } catch (const InputError& e) {
      EXPECT_NE(e.where().find(c.where), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
}

// Small hand-made files for the error paths and the merge order.
class TinyFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("tok-err"); }
  void TearDown() override { fs::remove_all(dir_); }
  // Vocab with every byte symbol is not needed: missing bytes fall back to <unk>.
  void write_pair(const std::string& vocab, const std::string& merges) {
    write(dir_ / "vocab.json", vocab);
    write(dir_ / "merges.txt", merges);
  }
  std::string where_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.where();
    }
    return "(no error)";
  }
  fs::path dir_;
};

TEST_F(TinyFiles, MergesApplyByRankAndUnknownBytesMapToUnk) {
  write_pair(R"({"<s>":0,"<pad>":1,"</s>":2,"<unk>":3,"a":4,"b":5,"c":6,"ab":7,"bc":8,"abc":9,"Ġ":10,"Ġa":11,"<mask>":12})",
             "#version: 0.2\nb c\na b\nĠ a\na bc\n");
  const ByteLevelBPE tok = ByteLevelBPE::from_dir(dir_.string());
  EXPECT_EQ(tok.encode("abc").ids, (Ids{9}));     // b c (rank 0) first, then a bc
  EXPECT_EQ(tok.encode("abab").ids, (Ids{7, 7}));  // every occurrence of the pair merges
  EXPECT_EQ(tok.encode("a d").ids, (Ids{4, 10, 3}));  // "d" has no symbol -> <unk>
  EXPECT_EQ(tok.encode("x <mask>").ids, (Ids{3, 12}));
  EXPECT_EQ(tok.special().mask, 12);
  EXPECT_EQ(tok.decode({11, 5}), " ab");
}

TEST_F(TinyFiles, ErrorsNameTheFileAndLine) {
  const std::string vocab = R"({"a":0,"b":1,"ab":2})";
  write_pair(vocab, "#version: 0.2\na b\na b c\n");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "merges.txt").string() + ":3");
  write_pair(vocab, "#version: 0.2\na x\n");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "merges.txt").string() + ":2");
  write_pair(vocab, "a\n");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "merges.txt").string() + ":1");
  write_pair(R"({"a":0,"b":)", "a b\n");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "vocab.json").string());
  write_pair(R"({"a":"zero"})", "");
  EXPECT_NE(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }).find("vocab.json"), std::string::npos);
  write_pair(vocab, "a b\n");
  write(dir_ / "tokenizer_config.json", "{not json");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "tokenizer_config.json").string());
  fs::remove(dir_ / "tokenizer_config.json");
  fs::remove(dir_ / "merges.txt");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "merges.txt").string());
  fs::remove(dir_ / "vocab.json");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "vocab.json").string());
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_files((dir_ / "nope.json").string(), "m.txt"); }),
            (dir_ / "nope.json").string());
  EXPECT_THROW(ByteLevelBPE::from_dir((dir_ / "missing-dir").string()), InputError);
  write(dir_ / "tokenizer.json", R"({"model":{"type":"WordPiece","vocab":{}}})");
  EXPECT_NE(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }).find("model.type"), std::string::npos);
  write(dir_ / "tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b", "ab"]}})");
  EXPECT_NE(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }).find("model.merges[1]"), std::string::npos);
}

// Inputs the fuzz target (fuzz/bpe_fuzz.cpp) showed escaping as other exceptions than InputError.
TEST_F(TinyFiles, MistypedOrOutOfRangeEntriesAreInputErrors) {
  const std::string v = R"({"a":0,"b":1,"ab":2})";
  // Keys of tokenizer.json read with a default: nlohmann's value() threw type_error on another type.
  for (const auto& [tj, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model":{"type":1,"vocab":)" + v + R"(,"merges":[]}})", "model.type"},
           {R"({"model":{"vocab":)" + v + R"(,"merges":[]},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":3}})",
            "pre_tokenizer.add_prefix_space"},
           {R"({"model":{"vocab":)" + v + R"(,"merges":[]},"pre_tokenizer":{"type":"ByteLevel","use_regex":"no"}})",
            "pre_tokenizer.use_regex"},
           {R"({"model":{"vocab":)" + v + R"(,"merges":[]},"pre_tokenizer":{"type":[]}})", "pre_tokenizer.type"}}) {
    write(dir_ / "tokenizer.json", tj);
    EXPECT_NE(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }).find(key), std::string::npos) << tj;
  }
  fs::remove(dir_ / "tokenizer.json");
  // A number too large for a double is out_of_range in nlohmann, not parse_error.
  write_pair(R"({"a": 1e400})", "");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "vocab.json").string());
  // Ids index dense tables: one id far past the vocabulary asked for 64 GiB (std::bad_alloc).
  write_pair(R"({"a":0,"b":2147483647})", "");
  EXPECT_EQ(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }), (dir_ / "vocab.json").string());
  write_pair(v, "a b\n");
  write(dir_ / "tokenizer_config.json", R"({"added_tokens_decoder": {"99999999999": {"content": "<x>"}}})");
  EXPECT_NE(where_of([&] { ByteLevelBPE::from_dir(dir_.string()); }).find("added_tokens_decoder.99999999999"),
            std::string::npos);
  // A sparse vocabulary and an added token a little past it still load.
  write_pair(R"({"a":0,"b":1,"ab":5})", "a b\n");
  write(dir_ / "tokenizer_config.json", R"({"added_tokens_decoder": {"1000": {"content": "<x>"}}})");
  const auto tok = ByteLevelBPE::from_dir(dir_.string());
  EXPECT_EQ(tok.vocab_size(), 1001);
  EXPECT_EQ(tok.encode("ab<x>").ids, (Ids{5, 1000}));
}

}  // namespace
}  // namespace evalrun
