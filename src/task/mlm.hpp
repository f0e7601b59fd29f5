// Masked-LM task: texts with <mask> tokens -> model inputs, and logits at the masks -> top-k fill-ins,
// filled text and accuracy against targets (as Hugging Face's fill-mask pipeline reports them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/serialize.hpp"
#include "io/text_dataset.hpp"
#include "tokenizer/encoder_tokenizer.hpp"

namespace evalrun {

struct MlmFeature {
  std::size_t sample_index;
  std::vector<std::int64_t> input_ids;       // the tokenizer's single frame: <s> text </s>, [CLS] text [SEP]
  std::vector<std::int64_t> token_type_ids;  // one per input id; empty when the tokenizer gives none
  std::vector<std::int64_t> mask_positions;  // positions of <mask> in input_ids
};

// One feature per sample. A sample without <mask>, one longer than max_seq_length, or with a targets
// list whose length differs from its mask count is an InputError naming the sample id.
std::vector<MlmFeature> make_mlm_features(const std::vector<TextSample>& samples, const EncoderTokenizer& tokenizer,
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

// What a rank sends rank 0 (and journals) of one sample: per mask its top-k and, with output.logits =
// "full", the whole logits row. The sample's index travels beside the record, not in it.
struct MlmItemScores {
  struct Mask {
    MaskTopK top;
    std::vector<float> full_row;  // empty unless the full row is kept
  };
  double seconds = 0.0;  // the sample's share of its batch's model time
  std::vector<Mask> masks;

  void write(ByteWriter& w) const {
    w.put<double>(seconds);
    w.put<std::uint64_t>(masks.size());
    for (const auto& m : masks) {
      w.put_vector(m.top.ids);
      w.put_vector(m.top.logits);
      w.put<double>(m.top.logsumexp);
      w.put<std::uint8_t>(m.full_row.empty() ? 0 : 1);
      if (!m.full_row.empty()) w.put_vector(m.full_row);
    }
  }
  static MlmItemScores read(ByteReader& r) {
    MlmItemScores s;
    s.seconds = r.get<double>();
    s.masks.resize(r.get<std::uint64_t>());
    for (auto& m : s.masks) {
      m.top.ids = r.get_vector<std::int64_t>();
      m.top.logits = r.get_vector<float>();
      m.top.logsumexp = r.get<double>();
      if (r.get<std::uint8_t>() != 0) m.full_row = r.get_vector<float>();
    }
    return s;
  }
};

// The fill-in prediction (top_k <= topk.ids.size()).
MaskPrediction predict_mask(const MaskTopK& topk, int top_k, const EncoderTokenizer& tokenizer);

// The text with every <mask> replaced by its top-1 token (special tokens dropped), as the pipeline's
// "sequence" field.
std::string fill_masks(const MlmFeature& feature, const std::vector<MaskPrediction>& predictions,
                       const EncoderTokenizer& tokenizer);

// A top-1 prediction is correct when its decoded text, stripped of surrounding whitespace, equals the
// target stripped likewise.
bool mask_prediction_correct(const MaskPrediction& prediction, const std::string& target);

}  // namespace evalrun
