// Masked-LM task: texts with <mask> tokens -> model inputs, and logits at the masks -> top-k fill-ins,
// filled text and accuracy against targets (as Hugging Face's fill-mask pipeline reports them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/text_dataset.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {

struct MlmFeature {
  std::size_t sample_index;
  std::vector<std::int64_t> input_ids;       // <s> text </s>
  std::vector<std::int64_t> mask_positions;  // positions of <mask> in input_ids
};

// One feature per sample. A sample without <mask>, one longer than max_seq_length, or with a targets
// list whose length differs from its mask count is an InputError naming the sample id.
std::vector<MlmFeature> make_mlm_features(const std::vector<TextSample>& samples, const ByteLevelBPE& tokenizer,
                                          int max_seq_length, const std::string& dataset_path);

struct MaskPrediction {
  std::vector<std::int64_t> token_ids;  // top-k, best first (ties: lower id first)
  std::vector<float> scores;            // softmax probabilities of those ids over the whole vocabulary
  std::vector<std::string> tokens;      // decoded token text of each id
};

// What a rank keeps of one mask's logits row when the full row is not stored: the k best ids and
// logits (ties: lower id first) and the row's log-sum-exp, enough for softmax scores of those ids.
struct MaskTopK {
  std::vector<std::int64_t> ids;
  std::vector<float> logits;
  double logsumexp = 0.0;
};
MaskTopK top_k_of_row(const float* logits, std::int64_t vocab, int k);

// The fill-in prediction (top_k <= topk.ids.size()).
MaskPrediction predict_mask(const MaskTopK& topk, int top_k, const ByteLevelBPE& tokenizer);

// The text with every <mask> replaced by its top-1 token (special tokens dropped), as the pipeline's
// "sequence" field.
std::string fill_masks(const MlmFeature& feature, const std::vector<MaskPrediction>& predictions,
                       const ByteLevelBPE& tokenizer);

// A top-1 prediction is correct when its decoded text, stripped of surrounding whitespace, equals the
// target stripped likewise.
bool mask_prediction_correct(const MaskPrediction& prediction, const std::string& target);

}  // namespace evalrun
