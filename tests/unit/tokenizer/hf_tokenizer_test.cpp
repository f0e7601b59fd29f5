// The tokenizer.json pipeline stage by stage, on hand-written snippets whose expected results follow
// the Hugging Face `tokenizers` crate's documented behaviour, and the error for every value evalrun
// does not implement.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "tokenizer/hf/pipeline.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace evalrun {
namespace {

using hf::json;
using Ids = std::vector<std::int64_t>;
const hf::JsonPath kAt{"tokenizer.json", "normalizer"};

std::string normalize(const std::string& spec, const std::string& text) {
  auto n = hf::make_normalizer(json::parse(spec), kAt, {});
  hf::NString s = hf::nstring_from_utf8(text);
  n->normalize(s);
  EXPECT_EQ(s.align.size(), s.s.size());
  return hf::to_utf8(s.s);
}

std::vector<std::string> pre_tokenize(const std::string& spec, const std::string& text) {
  auto p = hf::make_pre_tokenizer(json::parse(spec), {"tokenizer.json", "pre_tokenizer"}, {});
  std::vector<hf::NString> pieces{hf::nstring_from_utf8(text)};
  p->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (const auto& x : pieces) out.push_back(hf::to_utf8(x.s));
  return out;
}

std::string decode_with(const std::string& spec, std::vector<std::string> tokens) {
  auto d = hf::make_decoder(json::parse(spec), {"tokenizer.json", "decoder"}, {});
  d->decode(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

// A tokenizer.json around `model` with the given stages (JSON text or "null").
std::string file_with(const std::string& model, const std::string& normalizer = "null",
                      const std::string& pre = "null", const std::string& post = "null",
                      const std::string& decoder = "null", const std::string& added = "[]") {
  return R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": )" + added +
         R"(, "normalizer": )" + normalizer + R"(, "pre_tokenizer": )" + pre + R"(, "post_processor": )" + post +
         R"(, "decoder": )" + decoder + R"(, "model": )" + model + "}";
}

const char* kWords = R"({"type": "WordLevel", "unk_token": "[UNK]",
  "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "!": 3, "[CLS]": 4, "[SEP]": 5, "a": 6, "b": 7}})";

TEST(HfNormalizers, UnicodeForms) {
  EXPECT_EQ(normalize(R"({"type": "NFC"})", "cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(normalize(R"({"type": "NFD"})", "caf\u00e9"), "cafe\u0301");
  EXPECT_EQ(normalize(R"({"type": "NFKC"})", "\ufb01 \u2460"), "fi 1");
  EXPECT_EQ(normalize(R"({"type": "NFKD"})", "\u00c5"), "A\u030a");
}

TEST(HfNormalizers, NfcAlignsComposedCharacterToItsInputs) {
  auto n = hf::make_normalizer(json::parse(R"({"type": "NFC"})"), kAt, {});
  hf::NString s = hf::nstring_from_utf8("xe\u0301y");
  n->normalize(s);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.align[0], (std::pair{0, 1}));
  EXPECT_EQ(s.align[1], (std::pair{1, 3}));  // é from e + combining acute
  EXPECT_EQ(s.align[2], (std::pair{3, 4}));
}

TEST(HfNormalizers, CaseStripAccentsReplacePrepend) {
  EXPECT_EQ(normalize(R"({"type": "Lowercase"})", "HeLLo \u0130 \u03a3"), "hello i\u0307 \u03c3");
  EXPECT_EQ(normalize(R"({"type": "Strip", "strip_left": true, "strip_right": false})", "  a  "), "a  ");
  EXPECT_EQ(normalize(R"({"type": "Strip", "strip_left": true, "strip_right": true})", "\t a \n"), "a");
  EXPECT_EQ(normalize(R"({"type": "StripAccents"})", "e\u0301a\u0308"), "ea");
  EXPECT_EQ(normalize(R"({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"})", "a b  c"),
            "a\u2581b\u2581\u2581c");
  EXPECT_EQ(normalize(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})", "a \t\n b"), "a b");
  EXPECT_EQ(normalize(R"({"type": "Prepend", "prepend": "\u2581"})", "ab"), "\u2581ab");
  EXPECT_EQ(normalize(R"({"type": "Prepend", "prepend": "\u2581"})", ""), "");
  EXPECT_EQ(normalize(R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "_"}, {"type": "Lowercase"}]})", "AB"),
            "_ab");
}

TEST(HfNormalizers, BertNormalizer) {
  const char* bert = R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                         "strip_accents": null, "lowercase": true})";
  EXPECT_EQ(normalize(bert, "H\u00e9llo\tW\u0001orld\u4e2d"), "hello world \u4e2d ");
  const char* cased = R"({"type": "BertNormalizer", "lowercase": false, "strip_accents": null})";
  EXPECT_EQ(normalize(cased, "H\u00e9llo"), "H\u00e9llo");
}

TEST(HfPreTokenizers, SplitBehaviours) {
  auto split = [](const char* behavior, bool invert, const std::string& text) {
    return pre_tokenize(std::string(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")") + behavior +
                            R"(", "invert": )" + (invert ? "true" : "false") + "}",
                        text);
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed", false, "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(split("Isolated", false, "a-b--c"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split("MergedWithPrevious", false, "a-b--c"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split("MergedWithNext", false, "a-b--c"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split("Contiguous", false, "a-b--c"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split("Removed", true, "a-b--c"), (V{"-", "-", "-"}));
}

TEST(HfPreTokenizers, SplitRegexWithLookAheadAndCaseInsensitiveGroup) {
  // Llama 3's pattern: Oniguruma syntax that PCRE2 reads as written.
  const std::string llama3 =
      R"({"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}})";
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(llama3, "HE'S 12345  x\n\n"), (V{"HE", "'S", " ", "123", "45", " ", " x", "\n\n"}));
}

TEST(HfPreTokenizers, OnigurumaClassesWherePcre2Differs) {
  // Oniguruma's \s has U+0085 (NEL) and its \w has marks; PCRE2's UCP classes have neither.
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"})", "a\u0085b c"), (V{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Split", "pattern": {"Regex": "[^\\s]+"}, "behavior": "Removed", "invert": true})", "a\u0085b"),
            (V{"a", "b"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Removed", "invert": true})", "cafe\u0301 x_y"),
            (V{"cafe\u0301", "x_y"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Whitespace"})", "nai\u0308ve\u0085ok"), (V{"nai\u0308ve", "ok"}));
}

TEST(HfPreTokenizers, ByteLevelDigitsWhitespacePunctuation) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hi  there"),
            (V{"\u0120Hi", "\u0120", "\u0120there"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "\u00e9 a"),
            (V{"\u00c3\u00a9\u0120a"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Digits", "individual_digits": true})", "a123"), (V{"a", "1", "2", "3"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Digits", "individual_digits": false})", "a123b"), (V{"a", "123", "b"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Whitespace"})", "Hey, you!  ok"), (V{"Hey", ",", "you", "!", "ok"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "WhitespaceSplit"})", " Hey, you!\tok "), (V{"Hey,", "you!", "ok"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Punctuation", "behavior": "Isolated"})", "a,b!"), (V{"a", ",", "b", "!"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "BertPreTokenizer"})", "Hey, you!"), (V{"Hey", ",", "you", "!"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": true}]})",
                         "a1 b2"),
            (V{"a", "1", "b", "2"}));
}

TEST(HfPreTokenizers, MetaspaceSchemes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true})", "a b"),
            (V{"\u2581a", "\u2581b"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": false})", "a b"),
            (V{"a\u2581b"}));
  EXPECT_EQ(pre_tokenize(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false})", "a b"),
            (V{"\u2581a\u2581b"}));
}

TEST(HfModels, BpeMergesBothSpellingsByteFallbackUnk) {
  const std::string vocab = R"({"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "a": 3, "b": 4, "ab": 5, "c": 6, "abc": 7})";
  for (const char* merges : {R"(["a b", "ab c"])", R"([["a", "b"], ["ab", "c"]])"}) {
    const auto tok = HfTokenizer::from_json_text(
        file_with(R"({"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true, "vocab": )" + vocab +
                  ", \"merges\": " + merges + "}"),
        "t.json");
    EXPECT_EQ(tok.encode("abcab", false).ids, (Ids{7, 5}));
    EXPECT_EQ(tok.encode("a\u00e9", false).ids, (Ids{3, 1, 2}));  // é has no token: its bytes
  }
  const auto unk = HfTokenizer::from_json_text(
      file_with(R"({"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "vocab": )" + vocab + R"(, "merges": []})"), "t.json");
  EXPECT_EQ(unk.encode("a\u00e9\u00e9b", false).ids, (Ids{3, 0, 4}));  // fused unknowns
}

TEST(HfModels, BpeIgnoreMergesTakesWholeWordsAndPrefixes) {
  // "abc" is in the vocabulary but no merge makes it: ignore_merges takes it whole (Llama 3).
  const std::string vocab = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4})";
  auto tok = [&](bool ignore) {
    return HfTokenizer::from_json_text(file_with(std::string(R"({"type": "BPE", "ignore_merges": )") + (ignore ? "true" : "false") +
                                                 ", \"vocab\": " + vocab + R"(, "merges": ["a b"]})"),
                                       "t.json");
  };
  EXPECT_EQ(tok(true).encode("abc", false).ids, (Ids{4}));
  EXPECT_EQ(tok(false).encode("abc", false).ids, (Ids{3, 2}));
  const auto suffixed = HfTokenizer::from_json_text(
      file_with(R"({"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
                    "vocab": {"a": 0, "##b</w>": 1, "a##b</w>": 2, "ab</w>": 3}, "merges": ["a ##b</w>"]})"),
      "t.json");
  EXPECT_EQ(suffixed.encode("ab", false).ids, (Ids{3}));  // a + b</w>, the prefix dropped on merging
}

// The BPE model caches the first 10,000 distinct pieces (as the crate does): a piece met again, from
// the cache or past its capacity, gives the same ids, and its offsets are where this occurrence is.
TEST(HfModels, BpeCachedPiecesGiveTheSameIdsAndOffsets) {
  const auto tok = HfTokenizer::from_json_text(
      file_with(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "ca": 5},
                    "merges": ["a b", "ab c", "c a"]})",
                "null", R"({"type": "WhitespaceSplit"})"),
      "t.json");
  std::vector<std::string> words;  // 12,000 distinct words of 9 letters: more than the cache holds
  for (int i = 0; static_cast<int>(words.size()) < 12000; ++i) {
    std::string w;
    for (int k = 0, x = i; k < 9; ++k, x /= 3) w += static_cast<char>('a' + x % 3);
    words.push_back(w);
  }
  std::vector<Ids> first;
  for (const auto& w : words) first.push_back(tok.encode(w, false).ids);
  for (std::size_t i = 0; i < words.size(); ++i) ASSERT_EQ(tok.encode(words[i], false).ids, first[i]) << words[i];
  const auto twice = tok.encode("cabc cabc", false);
  EXPECT_EQ(twice.ids, (Ids{2, 4, 2, 4}));
  EXPECT_EQ(twice.offsets, (std::vector<std::pair<int, int>>{{0, 1}, {1, 4}, {5, 6}, {6, 9}}));
}

TEST(HfModels, WordPieceGreedyLongestAndUnk) {
  const auto tok = HfTokenizer::from_json_text(
      file_with(R"({"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 10,
                    "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "a": 4}})",
                "null", R"({"type": "WhitespaceSplit"})", "null", R"({"type": "WordPiece", "prefix": "##", "cleanup": true})"),
      "t.json");
  EXPECT_EQ(tok.encode("unaffable a xyz aaaaaaaaaaa", false).ids, (Ids{1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(tok.decode({1, 2, 3, 4}), "unaffable a");
}

TEST(HfModels, UnigramViterbiUnkAndByteFallback) {
  const std::string vocab = R"([["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["ab", -1.5], ["abc", -5.0], ["c", -2.0],
                               ["<0xC3>", -3.0], ["<0xA9>", -3.0]])";
  auto tok = [&](const std::string& extra) {
    return HfTokenizer::from_json_text(file_with(R"({"type": "Unigram", "vocab": )" + vocab + extra + "}"), "t.json");
  };
  const auto plain = tok(R"(, "unk_id": 0)");
  EXPECT_EQ(plain.encode("ab", false).ids, (Ids{3}));     // -1.5 beats a + b = -2
  EXPECT_EQ(plain.encode("abc", false).ids, (Ids{3, 5}));  // ab + c = -3.5 beats abc = -5 and a + b + c = -4
  // Characters no piece covers cost min score - 10 each, and a run of them is one unk token.
  const HfEncoding e = plain.encode("a\u00e9\u00e9b", false);
  EXPECT_EQ(e.ids, (Ids{1, 0, 2}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}, {3, 4}}));
  EXPECT_EQ(tok(R"(, "unk_id": 0, "byte_fallback": true)").encode("a\u00e9\u00e9b", false).ids, (Ids{1, 6, 7, 6, 7, 2}));
  // Equal scores: the path found first (the earlier start) is kept, as the crate does.
  const auto tie = HfTokenizer::from_json_text(
      file_with(R"({"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["ab", -2.0]]})"), "t.json");
  EXPECT_EQ(tie.encode("ab", false).ids, (Ids{3}));
  EXPECT_EQ(tie.decode({1, 2}), "a b");  // no decoder: tokens joined by spaces
  // Without unk_id, a character no piece covers cannot be encoded.
  const auto no_unk = tok("");
  EXPECT_EQ(no_unk.encode("ab", false).ids, (Ids{3}));
  try {
    no_unk.encode("a\u00e9", false);
    ADD_FAILURE() << "no error";
  } catch (const InputError& err) {
    EXPECT_EQ(err.where(), "t.json: model.unk_id");
  }
}

// A precompiled_charsmap with the given keys -> replacements, laid out as sentencepiece's Darts double
// array (one branch per key from the root: the keys' first bytes must differ).
std::string charsmap(const std::vector<std::pair<std::string, std::string>>& rules) {
  std::vector<std::uint32_t> units(1, 0);
  std::string strings;
  const std::uint32_t root_base = 1024;
  units[0] = root_base << 10;
  std::uint32_t next_base = 2048;
  auto put = [&](std::size_t pos, std::uint32_t v) {
    if (units.size() <= pos) units.resize(pos + 1, 0);
    units[pos] = v;
  };
  for (const auto& [key, value] : rules) {
    std::uint32_t base = root_base;
    for (std::size_t k = 0; k < key.size(); ++k) {
      const auto c = static_cast<unsigned char>(key[k]);
      const std::uint32_t pos = base ^ c, target = next_base;
      next_base += 1024;
      const bool last = k + 1 == key.size();
      put(pos, ((pos ^ target) << 10) | (last ? 1u << 8 : 0u) | c);
      base = target;
      if (last) put(target, static_cast<std::uint32_t>(strings.size()));  // the leaf: where its replacement starts
    }
    strings += value;
    strings.push_back('\0');
  }
  std::string blob(4, '\0');
  const std::uint32_t size = static_cast<std::uint32_t>(units.size() * 4);
  for (int k = 0; k < 4; ++k) blob[static_cast<std::size_t>(k)] = static_cast<char>((size >> (8 * k)) & 0xFF);
  for (std::uint32_t u : units) {
    for (int k = 0; k < 4; ++k) blob.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
  }
  blob += strings;
  static const char* const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (std::size_t i = 0; i < blob.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, blob.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(blob[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) b64.push_back(k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=');
  }
  return json{{"type", "Precompiled"}, {"precompiled_charsmap", b64}}.dump();
}

TEST(HfNormalizers, PrecompiledCharsmapByGraphemes) {
  // "ﬁ" -> "fi"; the two-character grapheme "e" + U+0301 -> "é"; U+3000 -> " ".
  const std::string spec = charsmap({{"\ufb01", "fi"}, {"e\u0301", "\u00e9"}, {"\u3000", " "}});
  EXPECT_EQ(normalize(spec, "\ufb01ne e\u0301t\u3000x"), "fine \u00e9t x");
  EXPECT_EQ(normalize(spec, "plain text"), "plain text");
  // Each rewritten character spans what it replaced: offsets still point into the input.
  const auto tok = HfTokenizer::from_json_text(file_with(kWords, spec, R"({"type": "WhitespaceSplit"})"), "t.json");
  const HfEncoding e = tok.encode("a\u3000b", false);
  EXPECT_EQ(e.ids, (Ids{6, 7}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<int, int>>{{0, 1}, {2, 3}}));
  auto n = hf::make_normalizer(json::parse(spec), kAt, {});
  hf::NString s = hf::nstring_from_utf8("\ufb01e\u0301");
  n->normalize(s);
  EXPECT_EQ(hf::to_utf8(s.s), "fi\u00e9");
  EXPECT_EQ(s.align, (std::vector<std::pair<int, int>>{{0, 1}, {0, 1}, {1, 3}}));
}

TEST(HfPostProcessors, TemplateBertRobertaWithTypeIds) {
  const char* tmpl = R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [4], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [5], "tokens": ["[SEP]"]}}})";
  const char* bert = R"({"type": "BertProcessing", "sep": ["[SEP]", 5], "cls": ["[CLS]", 4]})";
  const char* roberta = R"({"type": "RobertaProcessing", "sep": ["[SEP]", 5], "cls": ["[CLS]", 4], "trim_offsets": true, "add_prefix_space": false})";
  for (const char* post : {tmpl, bert}) {
    const auto tok = HfTokenizer::from_json_text(file_with(kWords, "null", R"({"type": "Whitespace"})", post), "t.json");
    const HfEncoding e = tok.encode_pair("hello world", "a b");
    EXPECT_EQ(e.ids, (Ids{4, 1, 2, 5, 6, 7, 5}));
    EXPECT_EQ(e.type_ids, (Ids{0, 0, 0, 0, 1, 1, 1}));
    EXPECT_EQ(tok.encode("hello", false).ids, (Ids{1}));
    EXPECT_EQ(tok.encode("hello").offsets, (std::vector<std::pair<int, int>>{{0, 0}, {0, 5}, {0, 0}}));
  }
  const auto rob = HfTokenizer::from_json_text(file_with(kWords, "null", R"({"type": "Whitespace"})", roberta), "t.json");
  EXPECT_EQ(rob.encode_pair("hello", "a").ids, (Ids{4, 1, 5, 5, 6, 5}));
  EXPECT_EQ(rob.encode_pair("hello", "a").type_ids, (Ids{0, 0, 0, 0, 0, 0}));
}

TEST(HfDecoders, EachStage) {
  EXPECT_EQ(decode_with(R"({"type": "ByteLevel"})", {"\u0120H", "\u00c3\u00a9", "\u00c3"}), " H\u00e9\ufffd");
  EXPECT_EQ(decode_with(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"})", {"\u2581a", "\u2581b"}), "a b");
  EXPECT_EQ(decode_with(R"({"type": "ByteFallback"})", {"<0xC3>", "<0xA9>", "x", "<0xFF>"}), "\u00e9x\ufffd");
  EXPECT_EQ(decode_with(R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})",
                        {"\u2581Hi", "\u2581", "<0x41>"}),
            "Hi A");
  EXPECT_EQ(decode_with(R"({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true})",
                        {"h", "h", "<pad>", "i", "|", "y", "o"}),
            "hi yo");
}

TEST(HfAddedTokens, MatchedBeforeThePipelineWithStripAndSingleWord) {
  const std::string added = R"([
    {"id": 4, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 3, "content": "!", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false},
    {"id": 5, "content": "[SEP]", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true}])";
  const auto tok = HfTokenizer::from_json_text(file_with(kWords, R"({"type": "Lowercase"})", R"({"type": "WhitespaceSplit"})",
                                                         "null", "null", added),
                                               "t.json");
  // [CLS] is not lower-cased (normalized: false); "!" only as a word of its own; [SEP] eats spaces.
  EXPECT_EQ(tok.encode("[CLS]Hello ! world!  [SEP]  a", false).ids, (Ids{4, 1, 3, 0, 5, 6}));
  EXPECT_EQ(tok.decode({4, 1, 5}, true), "hello");
  EXPECT_EQ(tok.decode({4, 1, 5}, false), "[CLS] hello [SEP]");
  EXPECT_TRUE(tok.is_special(4));
  EXPECT_FALSE(tok.is_special(3));
}

TEST(HfTokenizerFile, OffsetsAreCodePointsOfTheInput) {
  const auto tok = HfTokenizer::from_json_text(
      file_with(R"({"type": "BPE", "vocab": {"\u0120": 0, "h": 1, "\u00c3": 2, "\u00a9": 3, "\u00c3\u00a9": 4, "\u0120h": 5}, "merges": ["\u00c3 \u00a9", "\u0120 h"]})",
                "null", R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})"),
      "t.json");
  const HfEncoding e = tok.encode("\u00e9 h");
  EXPECT_EQ(e.ids, (Ids{4, 5}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}}));
}

// No quadratic case: PCRE2 re-checked the whole text's UTF validity on every match, which made a
// 1 MB text of short words take minutes. 200 KB inputs with Llama 3's pattern: linear takes well
// under a second even in a sanitizer build, quadratic far more than the bound.
TEST(HfTokenizerFile, LongInputsTakeLinearTime) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[hf::to_utf8(std::u32string(1, hf::byte_to_char(static_cast<std::uint8_t>(b))))] = b;
  const json file = {
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers",
          {{{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false},
            {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}}},
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", json::array()}}}};
  const auto tok = HfTokenizer::from_json_text(file.dump(), "t.json");
  std::string words;
  while (words.size() < 200000) words += "ab ";
  for (const std::string& text : {std::string(200000, ' '), std::string(200000, 'a'), words}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(tok.encode(text, false).ids.size(), text.size());  // one byte token per character
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  }
}

// Each unsupported value is an InputError naming the file, the JSON path and the value.
void expect_error(const std::string& file, const std::string& where, const std::string& what) {
  try {
    HfTokenizer::from_json_text(file, "dir/tokenizer.json");
    ADD_FAILURE() << "no error for " << where;
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), where);
    EXPECT_NE(e.detail().find(what), std::string::npos) << e.what();
  }
}

TEST(HfTokenizerFile, UnsupportedValuesNameFilePathAndValue) {
  expect_error(file_with(kWords, "null", R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "Foo"}]})"),
               "dir/tokenizer.json: pre_tokenizer.pretokenizers[1].type", "\"Foo\" is not supported (supported: Split, ByteLevel");
  expect_error(file_with(kWords, R"({"type": "Nmt"})"), "dir/tokenizer.json: normalizer.type",
               "\"Nmt\" is not supported (supported: NFC");
  expect_error(file_with(kWords, R"({"type": "Precompiled", "precompiled_charsmap": "AAA"})"),
               "dir/tokenizer.json: normalizer.precompiled_charsmap", "is not base64");
  expect_error(file_with(kWords, R"({"type": "Precompiled", "precompiled_charsmap": "/////w=="})"),
               "dir/tokenizer.json: normalizer.precompiled_charsmap", "does not fit");
  expect_error(file_with(R"({"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 5})"), "dir/tokenizer.json: model.unk_id",
               "not an index");
  expect_error(file_with(R"({"type": "Unigram", "vocab": [["a", "x"]]})"), "dir/tokenizer.json: model.vocab[0]",
               "expected [piece, score]");
  expect_error(file_with(R"({"type": "Foo", "vocab": {}})"), "dir/tokenizer.json: model.type",
               "\"Foo\" is not supported (supported: BPE, WordPiece, Unigram, WordLevel)");
  expect_error(file_with(kWords, "null", "null", R"({"type": "Bar"})"), "dir/tokenizer.json: post_processor.type", "\"Bar\"");
  expect_error(file_with(kWords, "null", "null", "null", R"({"type": "Sequence", "decoders": [{"type": "Baz"}]})"),
               "dir/tokenizer.json: decoder.decoders[0].type", "\"Baz\" is not supported");
  expect_error(file_with(kWords, "null", R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"})"),
               "dir/tokenizer.json: pre_tokenizer.behavior", "\"Sideways\" is not supported");
  expect_error(file_with(kWords, "null", R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"),
               "dir/tokenizer.json: pre_tokenizer.pattern.Regex", "does not compile");
  expect_error(file_with(kWords, "null", R"({"type": "Metaspace", "prepend_scheme": "sometimes"})"),
               "dir/tokenizer.json: pre_tokenizer.prepend_scheme", "\"sometimes\" is not supported");
  expect_error(file_with(R"({"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []})"), "dir/tokenizer.json: model.dropout",
               "not supported");
  expect_error(file_with(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})"), "dir/tokenizer.json: model.merges[0]",
               "\"b\" is not in the model's vocab");
  // Ids far past the vocabulary would make the dense id tables huge.
  expect_error(file_with(R"({"type": "WordLevel", "vocab": {"a": 99999999}})"), "dir/tokenizer.json: model.vocab.a", "far past");
  expect_error(file_with(kWords, "null", "null", "null", "null", R"([{"id": 99999999, "content": "x", "special": true}])"),
               "dir/tokenizer.json: added_tokens[0].id", "far past");
}

}  // namespace
}  // namespace evalrun
