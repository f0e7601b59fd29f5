// Softmax on raw float32 rows.
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Softmax over the scores s[0, n) of one query row in place, over the keys j <= last with
// key_mask[j] != 0 (causal attention over a padded key/value cache). Other entries become 0, and a
// row with no allowed key becomes all 0 (a padding query: HF would average uniformly; those rows
// feed only other padding rows).
void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t last);
// The same over the keys first <= j <= last (a sliding window: keys before `first` are masked too).
void causal_masked_softmax_row(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
                               std::int64_t last);

// The same with the probabilities rounded to bfloat16 (ops::bf16_of) and written to p16[0, n) instead
// of s, which is left holding intermediate values: the operand of a bfloat16 product, made in the
// softmax's last pass rather than in two more passes over the row (rounding, then packing).
void causal_masked_softmax_row_bf16(float* s, std::int64_t n, const std::int64_t* key_mask, std::int64_t first,
                                    std::int64_t last, std::uint16_t* p16);

}  // namespace evalrun::ops
