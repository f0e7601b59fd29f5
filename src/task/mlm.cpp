#include "task/mlm.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/errors.hpp"

namespace evalrun {
namespace {
std::string strip(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
}  // namespace

std::vector<MlmFeature> make_mlm_features(const std::vector<TextSample>& samples, const EncoderTokenizer& tokenizer,
                                          int max_seq_length, const std::string& dataset_path) {
  const auto& sp = tokenizer.special();
  if (sp.mask < 0) {
    throw InputError(tokenizer.vocab_file(),
                     "the tokenizer has no mask token (mask_token of special_tokens_map.json or "
                     "tokenizer_config.json, default \"<mask>\", is not in the vocabulary): it cannot run task.kind = \"mlm\"");
  }
  std::vector<MlmFeature> features;
  features.reserve(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const std::string where = dataset_path + ": sample '" + s.id + "'";
    MlmFeature f;
    f.sample_index = i;
    auto enc = tokenizer.encode(s.text);
    const EncoderFrame& fr = tokenizer.single();
    f.input_ids = fr.before;
    f.input_ids.insert(f.input_ids.end(), enc.ids.begin(), enc.ids.end());
    f.input_ids.insert(f.input_ids.end(), fr.after.begin(), fr.after.end());
    if (fr.has_types()) {
      f.token_type_ids = fr.before_types;
      f.token_type_ids.insert(f.token_type_ids.end(), enc.ids.size(), fr.a_type);
      f.token_type_ids.insert(f.token_type_ids.end(), fr.after_types.begin(), fr.after_types.end());
    }
    if (static_cast<int>(f.input_ids.size()) > max_seq_length) {
      throw InputError(where, std::to_string(f.input_ids.size()) + " tokens exceed task.max_seq_length = " +
                                  std::to_string(max_seq_length));
    }
    for (std::size_t p = 0; p < f.input_ids.size(); ++p) {
      if (f.input_ids[p] == sp.mask) f.mask_positions.push_back(static_cast<std::int64_t>(p));
    }
    if (f.mask_positions.empty()) throw InputError(where, "text has no <mask> token");
    if (!s.targets.empty() && s.targets.size() != f.mask_positions.size()) {
      throw InputError(where, std::to_string(s.targets.size()) + " targets given for " +
                                  std::to_string(f.mask_positions.size()) + " <mask> tokens");
    }
    features.push_back(std::move(f));
  }
  return features;
}

MaskTopK top_k_of_row(const float* logits, std::int64_t vocab, int k) {
  k = static_cast<int>(std::min<std::int64_t>(k, vocab));
  std::vector<std::int64_t> order(vocab);
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  MaskTopK t;
  // log-sum-exp in double so the scores do not depend on how the row was laid out in a batch
  const double mx = logits[order[0]];
  double sum = 0.0;
  for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  t.logsumexp = mx + std::log(sum);
  for (int i = 0; i < k; ++i) {
    t.ids.push_back(order[i]);
    t.logits.push_back(logits[order[i]]);
  }
  return t;
}

MaskPrediction predict_mask(const MaskTopK& topk, int top_k, const EncoderTokenizer& tokenizer) {
  MaskPrediction p;
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(top_k), topk.ids.size());
  for (std::size_t i = 0; i < k; ++i) {
    p.token_ids.push_back(topk.ids[i]);
    p.scores.push_back(static_cast<float>(std::exp(static_cast<double>(topk.logits[i]) - topk.logsumexp)));
    p.tokens.push_back(tokenizer.decode({topk.ids[i]}));
  }
  return p;
}

std::string fill_masks(const MlmFeature& feature, const std::vector<MaskPrediction>& predictions,
                       const EncoderTokenizer& tokenizer) {
  std::vector<std::int64_t> ids = feature.input_ids;
  for (std::size_t m = 0; m < feature.mask_positions.size() && m < predictions.size(); ++m) {
    if (!predictions[m].token_ids.empty()) ids[feature.mask_positions[m]] = predictions[m].token_ids[0];
  }
  return tokenizer.decode(ids, /*skip_special_tokens=*/true);
}

bool mask_prediction_correct(const MaskPrediction& prediction, const std::string& target) {
  return !prediction.tokens.empty() && strip(prediction.tokens[0]) == strip(target);
}

}  // namespace evalrun
