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

std::vector<QaFeature> make_qa_features(const std::vector<SquadExample>& examples, const EncoderTokenizer& tokenizer,
                                        const QaFeatureOptions& options) {
  const SpecialTokens& sp = tokenizer.special();
  const EncoderFrame& fr = tokenizer.pair();
  for (auto id : fr.before) {
    if (id < 0) throw InputError("tokenizer", "QA features need the special tokens that start a pair (<s> or [CLS])");
  }
  for (auto id : fr.after) {
    if (id < 0) throw InputError("tokenizer", "QA features need the special tokens that end a pair (</s> or [SEP])");
  }
  if (fr.before.empty() && fr.between.empty() && fr.after.empty()) {
    throw InputError("tokenizer", "QA features need a tokenizer that frames a pair with special tokens");
  }
  if (options.pad_to_max_length && sp.pad < 0) {
    throw InputError("tokenizer", "pad_to_max_length needs a <pad> token");
  }
  if (options.doc_stride < 0) throw InputError("doc_stride", "must not be negative");
  // The special tokens around the pair (RoBERTa: <s> q </s> </s> c </s>, four).
  const int n_special = static_cast<int>(fr.before.size() + fr.between.size() + fr.after.size());
  const int budget = options.max_seq_length - n_special;

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
      const std::size_t len = static_cast<std::size_t>(nq + (b - a) + n_special);
      const std::size_t total = options.pad_to_max_length ? std::max<std::size_t>(len, options.max_seq_length) : len;
      f.input_ids.reserve(total);
      f.offsets.reserve(total);
      const std::pair<int, int> none{-1, -1};
      const bool types = fr.has_types();
      // Appends ids with offsets (none for specials) and, when the tokenizer gives them, type ids.
      auto put = [&](auto first, auto last, const std::pair<int, int>* offsets, std::int64_t type,
                     const std::vector<std::int64_t>* special_types) {
        for (auto it = first; it != last; ++it) {
          const std::size_t k = static_cast<std::size_t>(it - first);
          f.input_ids.push_back(*it);
          f.offsets.push_back(offsets != nullptr ? offsets[k] : none);
          if (types) f.token_type_ids.push_back(special_types != nullptr ? (*special_types)[k] : type);
        }
      };
      put(fr.before.begin(), fr.before.end(), nullptr, 0, &fr.before_types);
      put(q.ids.begin(), q.ids.end(), nullptr, fr.a_type, nullptr);
      put(fr.between.begin(), fr.between.end(), nullptr, 0, &fr.between_types);
      put(c.ids.begin() + a, c.ids.begin() + b, c.offsets.data() + a, fr.b_type, nullptr);
      put(fr.after.begin(), fr.after.end(), nullptr, 0, &fr.after_types);
      f.attention_mask.assign(f.input_ids.size(), 1);
      if (total > len) {
        f.input_ids.resize(total, sp.pad);
        f.offsets.resize(total, none);
        f.attention_mask.resize(total, 0);
        if (types) f.token_type_ids.resize(total, 0);
      }
      features.push_back(std::move(f));
    }
  }
  return features;
}

}  // namespace evalrun
