// Internal to the tokenizer.json pipeline (not a public header): the text type every stage works on,
// the five stage interfaces, and the registry each stage file adds its row to.
//
// The format (Hugging Face `tokenizers`): text -> added tokens split out -> normalizer ->
// pre-tokenizer -> model -> post-processor; ids -> tokens -> decoder. Each stage is chosen by the
// "type" key of its JSON object; a type evalrun lacks is an InputError naming the JSON path, never a
// silent difference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace evalrun::hf {

using json = nlohmann::json;

// Where a stage's JSON sits, for messages: "tokenizer.json: pre_tokenizer.pretokenizers[1]".
struct JsonPath {
  std::string file;
  std::string path;
  JsonPath operator/(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  JsonPath operator[](std::size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  std::string str() const { return file + ": " + path; }
};

// Typed reads of optional keys that throw InputError at `at / key` on a wrong type.
std::string get_string(const json& j, const JsonPath& at, const char* key, const std::string& fallback);
bool get_bool(const json& j, const JsonPath& at, const char* key, bool fallback);
std::int64_t get_int(const json& j, const JsonPath& at, const char* key, std::int64_t fallback);
const json& get_required(const json& j, const JsonPath& at, const char* key);
[[noreturn]] void fail(const JsonPath& at, const std::string& what);

// Text as code points, each with the [start, end) code-point span of the original input it came from
// (what the fast tokenizers' offsets are made of). Normalizers rewrite it keeping `align` in step.
struct NString {
  std::u32string s;
  std::vector<std::pair<int, int>> align;  // one per code point of s
  std::size_t size() const { return s.size(); }
  NString slice(std::size_t b, std::size_t e) const;
  void append(const NString& o);
};
NString nstring_from_utf8(std::string_view text, int first_index = 0);
std::string to_utf8(std::u32string_view s);

// A compiled Oniguruma-style pattern (PCRE2, UTF + UCP, JIT when available), or a literal string.
class Pattern {
 public:
  // From a tokenizer.json pattern object {"Regex": "..."} or {"String": "..."}.
  static Pattern from_json(const json& j, const JsonPath& at);
  static Pattern regex(const std::string& re, const JsonPath& at);
  static Pattern literal(std::u32string s);
  // Non-overlapping matches, left to right, as [start, end) code-point spans (empty matches included).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::u32string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> re_;
  std::u32string literal_;
};

// Splitting text by matches, as tokenizers' SplitDelimiterBehavior.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
Behavior behavior_from_json(const json& j, const JsonPath& at);
// spans of `n` code points, each with is_match, tiling [0, n) -> the pieces kept, empty ones dropped.
std::vector<std::pair<std::size_t, std::size_t>> apply_behavior(
    const std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>>& spans, Behavior b);
// Matches (as find_all) -> alternating match / gap spans tiling [0, n).
std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>> tile_matches(
    const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t n, bool invert);
// Split one string where pred(c) holds, with `b`.
std::vector<NString> split_chars(const NString& s, const std::function<bool(char32_t)>& pred, Behavior b);

// Character classes as the Rust crate defines them (char::is_whitespace, is_numeric, Unicode P*).
bool is_rust_whitespace(char32_t c);
bool is_punctuation(char32_t c);
bool is_numeric(char32_t c);

// ---- stages ----
struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void normalize(NString& s) const = 0;
};

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  // Splits each piece further (a piece's align[0].first == 0 when it starts the input).
  virtual void pre_tokenize(std::vector<NString>& pieces) const = 0;
};

// A token of the model: id and [start, end) in code points of the piece it came from.
struct ModelToken {
  std::int64_t id;
  std::size_t start, end;
};
struct Model {
  virtual ~Model() = default;
  virtual void tokenize(const std::u32string& piece, std::vector<ModelToken>& out) const = 0;
  virtual std::int64_t token_to_id(const std::string& token) const = 0;  // -1 when absent
  virtual const std::string* id_to_token(std::int64_t id) const = 0;     // nullptr when absent
  virtual std::int64_t vocab_size() const = 0;
};

// An encoding under construction: ids, offsets (code points of the input), type ids, special flags.
struct Piece {
  std::vector<std::int64_t> ids;
  std::vector<std::pair<int, int>> offsets;
  std::vector<std::int64_t> type_ids;
  std::vector<bool> special;
  std::vector<std::string> tokens;  // token strings (ByteLevel's trim_offsets reads them)
};
struct PostProcessor {
  virtual ~PostProcessor() = default;
  // pair == nullptr for one sequence. add_special: add the special tokens (transformers' default).
  virtual Piece process(Piece a, Piece* pair, bool add_special) const = 0;
};

struct Decoder {
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// ---- registries: one table per stage kind; a stage file adds one row ----
// The model a post-processor needs to resolve token strings to ids.
struct BuildContext {
  const Model* model = nullptr;
};

template <class T>
using Factory = std::function<std::unique_ptr<T>(const json&, const JsonPath&, const BuildContext&)>;
template <class T>
struct Registration {
  const char* type;
  Factory<T> make;
};

// Builds the stage at `j` (an object with "type"), or throws naming `at.type` and the supported types.
std::unique_ptr<Normalizer> make_normalizer(const json& j, const JsonPath& at, const BuildContext& ctx);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const JsonPath& at, const BuildContext& ctx);
std::unique_ptr<Model> make_model(const json& j, const JsonPath& at, const BuildContext& ctx);
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const JsonPath& at, const BuildContext& ctx);
std::unique_ptr<Decoder> make_decoder(const json& j, const JsonPath& at, const BuildContext& ctx);

// The tables (each defined in its stage file).
const std::vector<Registration<Normalizer>>& normalizer_table();
const std::vector<Registration<PreTokenizer>>& pre_tokenizer_table();
const std::vector<Registration<Model>>& model_table();
const std::vector<Registration<PostProcessor>>& post_processor_table();
const std::vector<Registration<Decoder>>& decoder_table();

// The stages listed under `key` of a Sequence entry at `at`, each built by its kind's `make`.
template <class T>
std::vector<std::unique_ptr<T>> sequence_parts(const json& j, const JsonPath& at, const char* key, const BuildContext& ctx,
                                               std::unique_ptr<T> (*make)(const json&, const JsonPath&, const BuildContext&)) {
  const json& list = get_required(j, at, key);
  if (!list.is_array()) fail(at / key, "expected a list");
  std::vector<std::unique_ptr<T>> parts;
  for (std::size_t i = 0; i < list.size(); ++i) parts.push_back(make(list[i], (at / key)[i], ctx));
  return parts;
}

// Every occurrence of `from` in `s` replaced by `to` (left to right, not overlapping).
std::string replace_all(std::string s, const std::string& from, const std::string& to);
// transformers' clean_up_tokenization: no space before punctuation and English contractions.
std::string clean_up_tokenization(std::string s);

// GPT-2's byte <-> printable character map (ByteLevel pre-tokenizer, decoder).
char32_t byte_to_char(std::uint8_t b);
int char_to_byte(char32_t c);  // -1 when c is not one of the 256 stand-ins

}  // namespace evalrun::hf
