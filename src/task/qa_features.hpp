// Extractive-QA model inputs, as Hugging Face run_qa.py `prepare_validation_features` builds them:
// the tokenizer's pair frame around question and context window (RoBERTa: `<s> question </s></s>
// context-window </s>`; BERT: `[CLS] question [SEP] context-window [SEP]` with token types 0 / 1), the
// context cut into overlapping windows (truncation "only_second" with return_overflowing_tokens and
// stride = doc_stride).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/squad.hpp"
#include "tokenizer/encoder_tokenizer.hpp"

namespace evalrun {

struct QaFeature {
  std::size_t example_index = 0;  // into the examples given to make_qa_features
  int window = 0;                 // 0, 1, ... within its example
  std::vector<std::int64_t> input_ids;
  std::vector<std::int64_t> attention_mask;
  std::vector<std::int64_t> token_type_ids;  // one per input id; empty when the tokenizer gives none
  // One per input id: [start, end) code-point span in the example's context for context tokens,
  // {-1, -1} for question, special and padding tokens (run_qa's None).
  std::vector<std::pair<int, int>> offsets;
  // The window [context_token_start, context_token_stop) in the tokenized context.
  int context_token_start = 0;
  int context_token_stop = 0;
};

struct QaFeatureOptions {
  int max_seq_length = 384;
  int doc_stride = 128;
  bool pad_to_max_length = false;  // pad every feature to max_seq_length (pad id, attention 0)
};

// Python's str.lstrip(): drops leading Unicode whitespace (str.isspace) from UTF-8 text.
std::string python_lstrip(const std::string& text);

// Context-token windows [a, b) for a context of `n_context` tokens when `budget` context tokens fit in
// one feature: starts 0, step, 2*step, ... with step = budget - doc_stride, each window as long as
// fits, stopping after the first that reaches the end (so neighbours overlap by doc_stride tokens). One
// (possibly empty) window when everything fits. Requires budget > doc_stride when n_context > budget
// (the caller reports the error).
std::vector<std::pair<int, int>> qa_context_windows(int n_context, int budget, int doc_stride);

// Features of all examples, ordered by example then window. Each question and context is tokenized
// once. InputError naming the question id when the question leaves no room for context (HF errors
// too), or when the room left is not larger than doc_stride while the context needs several windows.
std::vector<QaFeature> make_qa_features(const std::vector<SquadExample>& examples, const EncoderTokenizer& tokenizer,
                                        const QaFeatureOptions& options);

}  // namespace evalrun
