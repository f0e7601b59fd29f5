#include "tokenizer/slow_converters.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"
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

struct Converter {
  const char* tokenizer_class;
  std::vector<const char*> files;  // what the class reads besides tokenizer_config.json
  json (*convert)(const fs::path& dir, const json& config, const std::string& config_file);
};
const Converter kConverters[] = {
    {"Qwen2Tokenizer", {"vocab.json", "merges.txt"}, qwen2},
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
