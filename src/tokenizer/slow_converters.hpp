// Slow tokenizer classes whose files evalrun reads by converting them, as transformers'
// convert_slow_tokenizer.py does when a fast tokenizer is asked for and there is no tokenizer.json:
// the tokenizer.json the converter would write, run by HfTokenizer. One row per class in
// slow_converters.cpp; a class without a row is read by the slow readers or refused
// (decoder_tokenizer.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace evalrun {

struct ConvertedTokenizer {
  std::string tokenizer_json;        // the converter's tokenizer.json text
  std::string name;                  // stands for the file in messages: "DIR/vocab.json (as Qwen2Tokenizer)"
  std::vector<std::string> files;    // the files it was made of (provenance)
};

// The conversion of the tokenizer in `dir` when tokenizer_config.json's tokenizer_class (with or
// without "Fast") has a row; nullopt otherwise. Missing or malformed files are InputErrors naming them.
std::optional<ConvertedTokenizer> convert_slow_tokenizer(const std::string& dir, const std::string& tokenizer_class);

}  // namespace evalrun
