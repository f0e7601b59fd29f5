#include "tokenizer/tiny_bpe.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "tokenizer/pretokenize.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Word {
  std::vector<int> symbols;  // token ids
  long count = 0;
};

// Distinct pre-tokens of the corpus as byte-symbol sequences, in a fixed (sorted) order.
std::vector<Word> corpus_words(const std::vector<int>& byte_token) {
  const std::string_view text = tiny_bpe_corpus();
  const auto cps = bpe_detail::to_code_points(text);
  std::vector<std::pair<int, int>> pieces;
  bpe_detail::split_gpt2(cps.cp, 0, static_cast<int>(cps.cp.size()), pieces);
  std::map<std::string, long> counts;
  for (const auto& [b, e] : pieces) {
    counts[std::string(text.substr(cps.byte_pos[b], cps.byte_pos[e] - cps.byte_pos[b]))] += 1;
  }
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [w, n] : counts) {
    Word word;
    word.count = n;
    for (const char ch : w) word.symbols.push_back(byte_token[static_cast<unsigned char>(ch)]);
    words.push_back(std::move(word));
  }
  return words;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InputError(path.string(), "cannot write file");
}

ojson added_token_json(const std::string& content, bool lstrip, bool with_special) {
  ojson t;
  t["content"] = content;
  t["lstrip"] = lstrip;
  t["normalized"] = !lstrip;  // as roberta-base: <mask> is the one non-normalized token
  t["rstrip"] = false;
  t["single_word"] = false;
  if (with_special) t["special"] = true;
  return t;
}

}  // namespace

void write_tiny_bpe_tokenizer(const std::string& dir, int vocab_target) {
  constexpr int kMinVocab = 4 + 256 + 1;
  if (vocab_target < kMinVocab) {
    throw InputError("tokenizer vocab size", "must be at least " + std::to_string(kMinVocab) + " (got " +
                                                 std::to_string(vocab_target) + ")");
  }
  // id -> token string (byte-level form), and the reverse.
  std::vector<std::string> tokens = {"<s>", "<pad>", "</s>", "<unk>"};
  std::unordered_map<std::string, int> ids;
  std::vector<int> byte_token(256);
  for (int b = 0; b < 256; ++b) {
    byte_token[b] = static_cast<int>(tokens.size());
    tokens.push_back(bpe_detail::byte_symbols()[b]);
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) ids[tokens[i]] = static_cast<int>(i);

  std::vector<Word> words = corpus_words(byte_token);
  std::vector<std::pair<int, int>> merges;
  while (static_cast<int>(tokens.size()) + 1 < vocab_target) {
    std::map<std::pair<int, int>, long> pairs;
    for (const Word& w : words) {
      for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) pairs[{w.symbols[i], w.symbols[i + 1]}] += w.count;
    }
    // Most frequent pair; ties go to the pair whose token strings sort first.
    const std::pair<int, int>* best = nullptr;
    long best_count = 0;
    for (const auto& [p, n] : pairs) {
      if (n > best_count ||
          (best != nullptr && n == best_count &&
           std::tie(tokens[p.first], tokens[p.second]) < std::tie(tokens[best->first], tokens[best->second]))) {
        best = &p;
        best_count = n;
      }
    }
    if (best == nullptr) break;  // every word is one token: the corpus has nothing more to give
    const auto [a, b] = *best;
    const std::string merged = tokens[a] + tokens[b];
    auto it = ids.find(merged);
    int m = 0;
    if (it == ids.end()) {  // the same string can come from two different merges
      m = static_cast<int>(tokens.size());
      tokens.push_back(merged);
      ids[merged] = m;
    } else {
      m = it->second;
    }
    merges.emplace_back(a, b);
    for (Word& w : words) {
      std::vector<int> out;
      out.reserve(w.symbols.size());
      for (std::size_t i = 0; i < w.symbols.size();) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(m);
          i += 2;
        } else {
          out.push_back(w.symbols[i++]);
        }
      }
      w.symbols.swap(out);
    }
  }
  const int mask_id = static_cast<int>(tokens.size());
  tokens.push_back("<mask>");

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir, "cannot create directory: " + ec.message());
  const fs::path d(dir);

  ojson vocab = ojson::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  write_text(d / "vocab.json", vocab.dump() + "\n");

  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [a, b] : merges) merges_txt += tokens[a] + " " + tokens[b] + "\n";
  write_text(d / "merges.txt", merges_txt);

  const std::pair<const char*, const char*> named[] = {{"bos_token", "<s>"},   {"cls_token", "<s>"},
                                                       {"eos_token", "</s>"},  {"mask_token", "<mask>"},
                                                       {"pad_token", "<pad>"}, {"sep_token", "</s>"},
                                                       {"unk_token", "<unk>"}};
  ojson stm = ojson::object();
  for (const auto& [key, content] : named) {
    stm[key] = added_token_json(content, std::string(key) == "mask_token", false);
  }
  write_text(d / "special_tokens_map.json", stm.dump(2) + "\n");

  ojson cfg = ojson::object();
  cfg["add_prefix_space"] = false;
  ojson decoder = ojson::object();
  for (const auto& [id, content] :
       std::vector<std::pair<int, std::string>>{{0, "<s>"}, {1, "<pad>"}, {2, "</s>"}, {3, "<unk>"}, {mask_id, "<mask>"}}) {
    decoder[std::to_string(id)] = added_token_json(content, content == "<mask>", true);
  }
  cfg["added_tokens_decoder"] = decoder;
  for (const auto& [key, content] : named) cfg[key] = content;
  cfg["clean_up_tokenization_spaces"] = true;
  cfg["errors"] = "replace";
  cfg["model_max_length"] = 512;
  cfg["tokenizer_class"] = "RobertaTokenizer";
  write_text(d / "tokenizer_config.json", cfg.dump(2) + "\n");
}

}  // namespace evalrun
