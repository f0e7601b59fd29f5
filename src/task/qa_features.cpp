#include "task/qa_features.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "common/errors.hpp"
#include "common/utf8.hpp"

namespace evalrun {

std::string python_lstrip(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const Utf8Char c = decode_utf8_at(text, i);
    if (!is_python_space(c.code_point)) break;  // an ill-formed byte is U+FFFD: not a space
    i += static_cast<std::size_t>(c.length);
  }
  return text.substr(i);
}

std::vector<std::pair<int, int>> qa_context_windows(int n_context, int budget, int doc_stride) {
  std::vector<std::pair<int, int>> windows;
  if (n_context <= budget) {
    windows.emplace_back(0, n_context);
    return windows;
  }
  // Same walk as the tokenizers library's Encoding::truncate (direction right): starts step apart.
  const int step = budget - doc_stride;
  for (int start = 0; start < n_context; start += step) {
    const int stop = std::min(start + budget, n_context);
    windows.emplace_back(start, stop);
    if (stop == n_context) break;
  }
  return windows;
}

std::vector<QaFeature> make_qa_features(const std::vector<SquadExample>& examples, const ByteLevelBPE& tokenizer,
                                        const QaFeatureOptions& options) {
  const SpecialTokens& sp = tokenizer.special();
  if (sp.bos < 0 || sp.eos < 0) throw InputError("tokenizer", "QA features need <s> and </s> special tokens");
  if (options.pad_to_max_length && sp.pad < 0) {
    throw InputError("tokenizer", "pad_to_max_length needs a <pad> token");
  }
  if (options.doc_stride < 0) throw InputError("doc_stride", "must not be negative");
  // <s> q </s> </s> c </s>: four special tokens around the pair.
  constexpr int kSpecial = 4;
  const int budget = options.max_seq_length - kSpecial;

  std::vector<QaFeature> features;
  // SQuAD asks ~5 questions per paragraph: tokenize every distinct context once.
  std::unordered_map<std::string_view, Encoding> context_cache;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    const SquadExample& ex = examples[e];
    const Encoding q = tokenizer.encode(python_lstrip(ex.question));
    auto cached = context_cache.find(ex.context);
    if (cached == context_cache.end()) cached = context_cache.emplace(ex.context, tokenizer.encode(ex.context)).first;
    const Encoding& c = cached->second;
    const int nq = static_cast<int>(q.ids.size());
    const int nc = static_cast<int>(c.ids.size());
    const std::string where = "question '" + ex.id + "'";

    std::vector<std::pair<int, int>> windows;
    if (nq + nc <= budget) {
      windows.emplace_back(0, nc);
    } else {
      const int room = budget - nq;  // context tokens per window
      if (room <= 0) {
        throw InputError(where, "the question is " + std::to_string(nq) + " tokens long and leaves no room for the context in max_seq_length " +
                                    std::to_string(options.max_seq_length));
      }
      if (room <= options.doc_stride) {
        throw InputError(where, "the question (" + std::to_string(nq) + " tokens) leaves room for " + std::to_string(room) +
                                    " context tokens per window, not more than doc_stride " +
                                    std::to_string(options.doc_stride) + "; lower doc_stride or raise max_seq_length");
      }
      windows = qa_context_windows(nc, room, options.doc_stride);
    }

    for (std::size_t w = 0; w < windows.size(); ++w) {
      const auto [a, b] = windows[w];
      QaFeature f;
      f.example_index = e;
      f.window = static_cast<int>(w);
      f.context_token_start = a;
      f.context_token_stop = b;
      const std::size_t len = static_cast<std::size_t>(nq + (b - a) + kSpecial);
      const std::size_t total = options.pad_to_max_length ? std::max<std::size_t>(len, options.max_seq_length) : len;
      f.input_ids.reserve(total);
      f.offsets.reserve(total);
      const std::pair<int, int> none{-1, -1};
      f.input_ids.push_back(sp.bos);
      f.input_ids.insert(f.input_ids.end(), q.ids.begin(), q.ids.end());
      f.input_ids.push_back(sp.eos);
      f.input_ids.push_back(sp.eos);
      f.offsets.assign(f.input_ids.size(), none);
      f.input_ids.insert(f.input_ids.end(), c.ids.begin() + a, c.ids.begin() + b);
      f.offsets.insert(f.offsets.end(), c.offsets.begin() + a, c.offsets.begin() + b);
      f.input_ids.push_back(sp.eos);
      f.offsets.push_back(none);
      f.attention_mask.assign(f.input_ids.size(), 1);
      if (total > len) {
        f.input_ids.resize(total, sp.pad);
        f.offsets.resize(total, none);
        f.attention_mask.resize(total, 0);
      }
      features.push_back(std::move(f));
    }
  }
  return features;
}

}  // namespace evalrun
