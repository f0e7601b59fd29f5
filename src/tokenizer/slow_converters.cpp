#include "tokenizer/slow_converters.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"
#include "common/utf8.hpp"
#include "tokenizer/slow_files.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  const std::string text = read_file(p.string());
  try {
    check_json_nesting(text, p.string());
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(p.string(), "malformed JSON: " + clip_text(e.what()));
  }
}

// merges.txt as tokenizer.json "merges" ("a b" strings).
json read_merges(const fs::path& p) {
  json merges = json::array();
  for (const auto& rule : read_merges_txt(p.string())) merges.push_back(rule.left + " " + rule.right);
  return merges;
}

// tokenizer_config.json's added_tokens_decoder as tokenizer.json "added_tokens".
json added_tokens(const json& config, const std::string& file) {
  json out = json::array();
  for_each_added_token(config, file, [&](std::int64_t id, const json& v, const std::string& where) {
    if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
      throw InputError(where, "expected an object with a string \"content\"");
    }
    auto flag = [&](const char* key, bool fallback) {
      if (!v.contains(key) || v[key].is_null()) return fallback;
      if (!v[key].is_boolean()) throw InputError(where + "." + key, "expected true or false");
      return v[key].get<bool>();
    };
    out.push_back({{"id", id},
                   {"content", v["content"]},
                   {"single_word", flag("single_word", false)},
                   {"lstrip", flag("lstrip", false)},
                   {"rstrip", flag("rstrip", false)},
                   {"normalized", flag("normalized", true)},
                   {"special", flag("special", false)}});
  });
  return out;
}

// transformers' Qwen2Converter: NFC, Qwen2's split pattern (single digits; letters with at most one
// leading non-letter), byte-level BPE without a prefix space, ByteLevel decoder and post-processor.
json qwen2(const fs::path& dir, const json& config, const std::string& config_file) {
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  const bool prefix_space = config.contains("add_prefix_space") && config["add_prefix_space"].is_boolean() &&
                            config["add_prefix_space"].get<bool>();
  return {{"version", "1.0"},
          {"added_tokens", added_tokens(config, config_file)},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern",
                {{"Regex",
                  R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true}, {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", false}, {"use_regex", false}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", read_json(vocab)},
            {"merges", read_merges(merges)}}}};
}

// vocab.txt (BertTokenizer's load_vocab): one token per line, the line number is its id. A token on
// two lines would give the slow and the fast tokenizer different ids: refused, naming the lines.
json read_vocab_txt(const fs::path& p) {
  const std::string text = read_file(p.string());
  json vocab = json::object();
  std::size_t line = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string token = text.substr(pos, nl - pos);
    if (find_invalid_utf8(token) != std::string::npos) {
      throw InputError(p.string() + ":" + std::to_string(line + 1), "the token is not valid UTF-8");
    }
    if (vocab.contains(token)) {
      throw InputError(p.string() + ":" + std::to_string(line + 1),
                       "token " + json(token).dump() + " is also on line " +
                           std::to_string(vocab[token].get<std::int64_t>() + 1));
    }
    vocab[token] = static_cast<std::int64_t>(line);
    ++line;
    pos = nl + 1;
  }
  return vocab;
}

// A tokenizer_config.json special token (cls_token, ...): a string, or an object with "content".
std::string special_token(const json& config, const std::string& file, const char* key, const char* fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw InputError(file + ": " + key, "expected a string or an object with a string \"content\"");
}

bool config_flag(const json& config, const std::string& file, const char* key, bool fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) throw InputError(file + ": " + key, "expected true or false, got " + config[key].dump());
  return config[key].get<bool>();
}

// transformers' BertConverter (BertTokenizer, DistilBertTokenizer): BertNormalizer with the
// tokenizer's lower-casing / accent / Chinese-character settings, BertPreTokenizer, WordPiece with
// "##" continuations, [CLS] A [SEP] (B [SEP]) with type ids 0 for A and 1 for B, WordPiece decoder.
json bert(const fs::path& dir, const json& config, const std::string& config_file) {
  if (!config_flag(config, config_file, "do_basic_tokenize", true)) {
    throw InputError(config_file + ": do_basic_tokenize", "false is not supported (the fast tokenizer always splits words)");
  }
  if (config.contains("never_split") && !config["never_split"].is_null() &&
      !(config["never_split"].is_array() && config["never_split"].empty())) {
    throw InputError(config_file + ": never_split", "is not supported (the fast tokenizer ignores it), got " +
                                                        clip_text(config["never_split"].dump()));
  }
  const json vocab = read_vocab_txt(dir / "vocab.txt");
  const std::string vocab_file = (dir / "vocab.txt").string();
  const std::string cls = special_token(config, config_file, "cls_token", "[CLS]");
  const std::string sep = special_token(config, config_file, "sep_token", "[SEP]");
  const std::string unk = special_token(config, config_file, "unk_token", "[UNK]");
  for (const auto& [key, tok] : {std::pair<const char*, std::string>{"cls_token", cls}, {"sep_token", sep}}) {
    if (!vocab.contains(tok)) throw InputError(config_file + ": " + key, json(tok).dump() + " is not in " + vocab_file);
  }
  const bool lower = config_flag(config, config_file, "do_lower_case", true);
  json strip = nullptr;  // null: as lowercase
  if (config.contains("strip_accents") && !config["strip_accents"].is_null()) {
    strip = config_flag(config, config_file, "strip_accents", lower);
  }
  auto special = [](const std::string& id, int type) { return json{{"SpecialToken", {{"id", id}, {"type_id", type}}}}; };
  auto sequence = [](const char* id, int type) { return json{{"Sequence", {{"id", id}, {"type_id", type}}}}; };
  return {{"version", "1.0"},
          {"added_tokens", added_tokens(config, config_file)},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", config_flag(config, config_file, "tokenize_chinese_chars", true)},
            {"strip_accents", strip},
            {"lowercase", lower}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {special(cls, 0), sequence("A", 0), special(sep, 0)}},
            {"pair", {special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1), special(sep, 1)}},
            {"special_tokens",
             {{cls, {{"id", cls}, {"ids", {vocab[cls]}}, {"tokens", {cls}}}},
              {sep, {{"id", sep}, {"ids", {vocab[sep]}}, {"tokens", {sep}}}}}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", unk},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", vocab}}}};
}

// The fields of sentencepiece's ModelProto (sentencepiece_model.proto) the XLM-R conversion reads,
// from the protobuf wire format: pieces (1: piece, 2: score, 3: type), trainer_spec.model_type,
// normalizer_spec.precompiled_charsmap.
struct SpModel {
  struct Piece {
    std::string piece;
    float score = 0;
  };
  std::vector<Piece> pieces;
  std::int64_t model_type = 1;  // UNIGRAM, the proto's default
  std::string precompiled_charsmap;
};

class ProtoReader {
 public:
  ProtoReader(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {}
  bool done() const { return pos_ >= data_.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) bad("a varint runs past the end");
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    bad("a varint is longer than 10 bytes");
  }
  std::string_view bytes(std::size_t n) {
    if (n > data_.size() - pos_) bad("a field runs past the end");
    const std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  // The next field: (number, wire type); its value is then read with the calls below.
  std::pair<std::uint64_t, int> tag() {
    const std::uint64_t t = varint();
    return {t >> 3, static_cast<int>(t & 7)};
  }
  std::string_view length_delimited() { return bytes(static_cast<std::size_t>(varint())); }
  float fixed32_float() {
    const std::string_view b = bytes(4);
    std::uint32_t u = 0;
    for (int k = 3; k >= 0; --k) u = (u << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(k)]);
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: bytes(8); break;
      case 2: length_delimited(); break;
      case 5: bytes(4); break;
      default: bad("wire type " + std::to_string(wire) + " is not a protobuf one");
    }
  }
  [[noreturn]] void bad(const std::string& what) const {
    throw InputError(where_, "not a sentencepiece model: " + what + " (byte " + std::to_string(pos_) + ")");
  }

 private:
  std::string_view data_;
  std::string where_;
  std::size_t pos_ = 0;
};

SpModel read_sp_model(const fs::path& p) {
  const std::string data = read_file(p.string());
  SpModel m;
  ProtoReader r(data, p.string());
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == 2) {
      ProtoReader pr(r.length_delimited(), p.string());
      SpModel::Piece piece;
      while (!pr.done()) {
        const auto [f, w] = pr.tag();
        if (f == 1 && w == 2) piece.piece = std::string(pr.length_delimited());
        else if (f == 2 && w == 5) piece.score = pr.fixed32_float();
        else pr.skip(w);
      }
      m.pieces.push_back(std::move(piece));
    } else if ((field == 2 || field == 3) && wire == 2) {
      ProtoReader sub(r.length_delimited(), p.string());
      while (!sub.done()) {
        const auto [f, w] = sub.tag();
        if (field == 2 && f == 3 && w == 0) m.model_type = static_cast<std::int64_t>(sub.varint());
        else if (field == 3 && f == 2 && w == 2) m.precompiled_charsmap = std::string(sub.length_delimited());
        else sub.skip(w);
      }
    } else {
      r.skip(wire);
    }
  }
  if (m.pieces.size() < 3) throw InputError(p.string(), "a sentencepiece model with " + std::to_string(m.pieces.size()) + " pieces");
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    if (find_invalid_utf8(m.pieces[i].piece) != std::string::npos) {
      throw InputError(p.string(), "piece " + std::to_string(i) + " is not valid UTF-8");
    }
  }
  return m;
}

std::string base64_encode(std::string_view in) {
  static const char* const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out.push_back(k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

// transformers' XLMRobertaConverter (an SpmConverter): the model's precompiled_charsmap, then
// right-strip and runs of spaces to one "▁"; Metaspace "▁" prepended always; Unigram over fairseq's
// vocabulary (<s> <pad> </s> <unk>, the pieces after sentencepiece's first three with their scores,
// <mask>; unk 3); <s> A </s> / <s> A </s> </s> B </s>; Metaspace decoder.
json xlm_roberta(const fs::path& dir, const json& config, const std::string& config_file) {
  const fs::path model_file = dir / "sentencepiece.bpe.model";
  const SpModel m = read_sp_model(model_file);
  if (m.model_type != 1) {
    throw InputError(model_file.string(), "trainer_spec.model_type " + std::to_string(m.model_type) +
                                              " is not supported for XLMRobertaTokenizer (supported: 1, unigram)");
  }
  json vocab = json::array({json::array({"<s>", 0.0}), json::array({"<pad>", 0.0}), json::array({"</s>", 0.0}),
                            json::array({"<unk>", 0.0})});
  for (std::size_t i = 3; i < m.pieces.size(); ++i) vocab.push_back(json::array({m.pieces[i].piece, m.pieces[i].score}));
  vocab.push_back(json::array({"<mask>", 0.0}));
  json normalizers = json::array();
  if (!m.precompiled_charsmap.empty()) {
    normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(m.precompiled_charsmap)}});
  }
  normalizers.push_back({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "\u2581"}});
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  auto special = [](const char* id) { return json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}}; };
  auto sequence = [](const char* id) { return json{{"Sequence", {{"id", id}, {"type_id", 0}}}}; };
  return {{"version", "1.0"},
          {"added_tokens", added_tokens(config, config_file)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
          {"pre_tokenizer", metaspace},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {special("<s>"), sequence("A"), special("</s>")}},
            {"pair", {special("<s>"), sequence("A"), special("</s>"), special("</s>"), sequence("B"), special("</s>")}},
            {"special_tokens",
             {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
              {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}}},
          {"decoder", metaspace},
          {"model", {{"type", "Unigram"}, {"unk_id", 3}, {"vocab", vocab}, {"byte_fallback", false}}}};
}

struct Converter {
  const char* tokenizer_class;
  std::vector<const char*> files;  // what the class reads besides tokenizer_config.json
  json (*convert)(const fs::path& dir, const json& config, const std::string& config_file);
};
const Converter kConverters[] = {
    {"Qwen2Tokenizer", {"vocab.json", "merges.txt"}, qwen2},
    {"BertTokenizer", {"vocab.txt"}, bert},
    {"DistilBertTokenizer", {"vocab.txt"}, bert},
    {"XLMRobertaTokenizer", {"sentencepiece.bpe.model"}, xlm_roberta},
};

}  // namespace

std::optional<ConvertedTokenizer> convert_slow_tokenizer(const std::string& dir, const std::string& tokenizer_class) {
  const std::string fast = "Fast";
  std::string base = tokenizer_class;
  if (base.size() > fast.size() && base.compare(base.size() - fast.size(), fast.size(), fast) == 0) {
    base.resize(base.size() - fast.size());
  }
  for (const auto& c : kConverters) {
    if (base != c.tokenizer_class) continue;
    const fs::path d(dir);
    const fs::path config_path = d / "tokenizer_config.json";
    ConvertedTokenizer out;
    for (const char* f : c.files) {
      if (!fs::exists(d / f)) throw InputError((d / f).string(), std::string("missing: ") + c.tokenizer_class + " needs it");
      out.files.push_back((d / f).string());
    }
    out.tokenizer_json = c.convert(d, read_json(config_path), config_path.string()).dump();
    out.name = (d / c.files.front()).string() + " (as " + c.tokenizer_class + ")";
    return out;
  }
  return std::nullopt;
}

}  // namespace evalrun
