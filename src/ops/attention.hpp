// Scaled dot-product attention on raw float32 buffers, one strided sgemm pair (or, with
// bf16_products, one bfloat16 matmul pair) per (batch row, head):
// the float32 fast path of every model (encoders: bidirectional over the batch's own keys; decoders:
// causal over a key/value cache). Reads queries, keys and values where they lie (a fused q|k|v buffer,
// a cache) through strides: no permute copies.
#pragma once

#include <cstdint>

namespace evalrun::ops {

// Where the rows of one tensor lie: row t of (batch row b, head h) starts at
// base + b * batch_stride + h * head_stride + t * row_stride.
struct HeadRows {
  const float* base = nullptr;
  std::int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  const float* at(std::int64_t b, std::int64_t h) const { return base + b * batch_stride + h * head_stride; }
};

// The same for keys and values stored as bfloat16 values (raw 16-bit patterns): a bfloat16 model's
// KV cache on the raw-buffer path.
struct HeadRowsBf16 {
  const std::uint16_t* base = nullptr;
  std::int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  const std::uint16_t* at(std::int64_t b, std::int64_t h) const { return base + b * batch_stride + h * head_stride; }
};

struct AttentionShape {
  std::int64_t batch = 0;
  std::int64_t queries = 0;      // query rows per batch row
  std::int64_t keys = 0;         // key rows per batch row (T)
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;  // query head h reads kv head h / (heads / kv_heads)
  // Causal: query r is key index first_query + r and attends to keys j <= its own index.
  // Not causal: every query attends to every key.
  bool causal = false;
  std::int64_t first_query = 0;
  // Sliding window (causal only; 0 = none): query index p attends to keys max(0, p - window) .. p,
  // window + 1 keys, as transformers 4.39's eager Mistral mask (keys j <= p - window - 1 masked).
  std::int64_t window = 0;
  float scale = 1.0f;            // scores = scale * q . k
  // A bfloat16 model (its inputs hold bfloat16 values): rounded where its eager attention stores
  // bfloat16 tensors. q . k rounded, then scaled (divided by score_divisor when it is not 0, as HF's
  // `/ math.sqrt(head_dim)`, else multiplied by scale) and rounded again; the float32 softmax's
  // probabilities rounded before the second product; its result rounded.
  bool bf16 = false;
  float score_divisor = 0.0f;
  // Both products on bfloat16 operands (ops::gemm_bf16: float32 accumulation, float32 results; needs
  // have_bf16_gemm()): q, k, v and the probabilities are rounded to bfloat16 before their product. With
  // bf16 set they already hold bfloat16 values, so the results equal the float32 products' up to the
  // order of the sums; for a float32 model it is a mixed-precision choice (quantization.attention).
  bool bf16_products = false;
};

// out (row t of (b, h) at out + b * out_batch_stride + h * head_dim + t * out_row_stride) =
// softmax(scale * q k^T over the allowed keys) v. Allowed: key_mask[b * keys + j] != 0 (and the causal
// bound). A query with no allowed key gets a zero context (see causal_masked_softmax_row).
// Parallel over (batch row, head) tasks; one query step of a grouped-query model (queries == 1,
// heads > kv_heads) runs the heads sharing a kv head as one product.
void attention_f32(const AttentionShape& shape, const HeadRows& q, const HeadRows& k, const HeadRows& v,
                   const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride,
                   std::int64_t out_row_stride);

// The same over bfloat16 keys and values (shape.bf16 set: their values are what a bfloat16 model's
// cache holds), each task's rows widened to float32 (exact) before its products.
void attention_bf16_cache(const AttentionShape& shape, const HeadRows& q, const HeadRowsBf16& k, const HeadRowsBf16& v,
                          const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride,
                          std::int64_t out_row_stride);

// The same with queries, keys and values all bfloat16 (a bfloat16 encoder's fused QKV tensor, read in
// place); shape.bf16_products must be set.
void attention_bf16(const AttentionShape& shape, const HeadRowsBf16& q, const HeadRowsBf16& k, const HeadRowsBf16& v,
                    const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride, std::int64_t out_row_stride);

}  // namespace evalrun::ops
