// The slow tokenizers' files, read the same way by every tokenizer that takes them: merges.txt and
// tokenizer_config.json's "added_tokens_decoder" ({"<id>": {"content": ..., "special": ...}}).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace evalrun {

// Calls each(id, entry, where) for every entry, where = "FILE: added_tokens_decoder.<id>". A
// non-object added_tokens_decoder, or a key that is not a non-negative token id, is an InputError
// naming it; the entry itself is the caller's to check. Nothing happens when the key is absent.
void for_each_added_token(const nlohmann::json& config, const std::string& file,
                          const std::function<void(std::int64_t, const nlohmann::json&, const std::string&)>& each);

// One merge rule of merges.txt (or of a tokenizer.json's model.merges).
struct MergeRule {
  std::string left, right;
  std::string where;  // file:line or file: model.merges[i], for errors
};
// merges.txt: an optional "#version" first line, then "a b" per line (blank lines skipped); any other
// line is an InputError naming file:line.
std::vector<MergeRule> read_merges_txt(const std::string& path);

}  // namespace evalrun
