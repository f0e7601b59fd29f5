// Tensor-parallel parts of a layer read from a checkpoint (quant::Shard): the part a rank loads must
// be exactly the rows (column-parallel) or columns (row-parallel) of the whole layer's weight, with
// the bias on the parts that add it, for every storage format; impossible splits are errors naming
// the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "model/loader_util.hpp"
#include "quant/fp8.hpp"
#include "quant/gptq.hpp"
#include "quant/int8.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using quant::Shard;

namespace {

constexpr std::int64_t kIn = 128, kOut = 64;

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Rows [r0, r1) x columns [c0, c1) of a row-major [rows, cols] matrix.
std::vector<float> block(const std::vector<float>& m, std::int64_t cols, std::int64_t r0, std::int64_t r1,
                         std::int64_t c0, std::int64_t c1) {
  std::vector<float> out;
  for (std::int64_t r = r0; r < r1; ++r) out.insert(out.end(), m.begin() + r * cols + c0, m.begin() + r * cols + c1);
  return out;
}

class ShardLoad : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = evalrun::testing::make_temp_dir("evalrun-shard"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `layer` (its own export) as the checkpoint's only layer "l".
  void save(const quant::Linear& layer) {
    std::vector<TensorToWrite> tensors;
    layer.export_tensors("l", tensors);
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
  }

  // Loads the whole layer and its two halves split both ways; each part's weight and bias must be
  // the whole one's slice.
  template <typename Load>
  void expect_parts_are_slices(Load load) {
    auto whole = load(Shard::whole());
    const auto w = whole->weight_f32(), b = whole->bias_f32();
    for (std::int64_t half = 0; half < 2; ++half) {
      SCOPED_TRACE(half);
      const std::int64_t o0 = half * kOut / 2, o1 = o0 + kOut / 2, i0 = half * kIn / 2, i1 = i0 + kIn / 2;
      auto col = load(Shard::columns(o0, o1));
      EXPECT_EQ(col->in_features(), kIn);
      EXPECT_EQ(col->out_features(), kOut / 2);
      EXPECT_EQ(col->weight_f32(), block(w, kIn, o0, o1, 0, kIn));
      if (!b.empty()) {
        EXPECT_EQ(col->bias_f32(), std::vector<float>(b.begin() + o0, b.begin() + o1));
      }
      auto row = load(Shard::rows(i0, i1, half == 0));
      EXPECT_EQ(row->in_features(), kIn / 2);
      EXPECT_EQ(row->out_features(), kOut);
      EXPECT_EQ(row->weight_f32(), block(w, kIn, 0, kOut, i0, i1));
      if (!b.empty()) {
        const auto rb = row->bias_f32();
        // the bias belongs to one part (a float part of the others holds zeros)
        if (half == 0) {
          EXPECT_EQ(rb, b);
        } else {
          EXPECT_TRUE(rb.empty() || rb == std::vector<float>(b.size(), 0.0f));
        }
      }
      EXPECT_LT(row->resident_bytes(), whole->resident_bytes());
    }
  }

  fs::path dir_;
};

}  // namespace

TEST_F(ShardLoad, FloatLayers) {
  const auto w = random_values(kIn * kOut, 1), b = random_values(kOut, 2);
  TensorToWrite wt{"l.weight", TensorDType::F32, {kOut, kIn}, std::vector<std::byte>(w.size() * 4)};
  std::memcpy(wt.data.data(), w.data(), wt.data.size());
  TensorToWrite bt{"l.bias", TensorDType::F32, {kOut}, std::vector<std::byte>(b.size() * 4)};
  std::memcpy(bt.data.data(), b.data(), bt.data.size());
  write_safetensors((dir_ / "model.safetensors").string(), {wt, bt});
  Checkpoint ckpt(dir_.string());
  quant::QuantConfig none;
  std::set<std::string> used;
  for (bool transposed : {false, true}) {
    const model::LinearLoad how{ckpt, none, torch::kFloat32, false, transposed, used};
    expect_parts_are_slices([&](const Shard& s) { return model::load_linear(how, "l", kIn, kOut, true, s); });
  }
}

TEST_F(ShardLoad, GptqLayersInOrderAndActOrder) {
  const auto w = random_values(kIn * kOut, 3), b = random_values(kOut, 4);
  for (bool act_order : {false, true}) {
    SCOPED_TRACE(act_order);
    quant::GptqSettings s;
    s.group_size = 32;
    s.sym = false;
    s.desc_act = act_order;
    std::vector<std::int32_t> g_idx(kIn);
    for (std::int64_t i = 0; i < kIn; ++i) g_idx[i] = static_cast<std::int32_t>(i / 32);
    if (act_order) std::shuffle(g_idx.begin(), g_idx.end(), std::mt19937(5));
    auto t = quant::gptq_quantize_rtn(w.data(), kOut, kIn, s, g_idx);
    t.bias = b;
    save(*quant::make_gptq_linear(t, s, "test", "l"));
    Checkpoint ckpt(dir_.string());
    std::set<std::string> used;
    expect_parts_are_slices([&](const Shard& sh) { return quant::load_gptq_linear(ckpt, "l", kIn, kOut, s, used, sh); });
  }
}

TEST_F(ShardLoad, GptqSplitsThatCutPackingOrGroupsAreErrors) {
  quant::GptqSettings s;
  s.group_size = 32;
  const auto w = random_values(kIn * kOut, 6);
  save(*quant::make_gptq_linear(quant::gptq_quantize_rtn(w.data(), kOut, kIn, s, {}), s, "test", "l"));
  Checkpoint ckpt(dir_.string());
  std::set<std::string> used;
  EXPECT_THROW(quant::load_gptq_linear(ckpt, "l", kIn, kOut, s, used, Shard::columns(0, 20)), InputError);
  EXPECT_THROW(quant::load_gptq_linear(ckpt, "l", kIn, kOut, s, used, Shard::rows(0, 12, true)), InputError);
  try {
    quant::load_gptq_linear(ckpt, "l", kIn, kOut, s, used, Shard::rows(16, 48, true));
    FAIL() << "a row part inside a group must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("group boundary (group_size 32)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("l.qweight"), std::string::npos) << e.what();
  }
}

TEST_F(ShardLoad, Int8AndFp8Layers) {
  const auto w = random_values(kIn * kOut, 7), b = random_values(kOut, 8);
  {
    auto t = quant::fp8_quantize(w.data(), kOut, kIn, true);
    t.bias = b;
    quant::Fp8Settings s;
    save(*quant::make_fp8_linear(t, s, "test", "l"));
    Checkpoint ckpt(dir_.string());
    std::set<std::string> used;
    expect_parts_are_slices([&](const Shard& sh) { return quant::load_fp8_linear(ckpt, "l", kIn, kOut, s, used, sh); });
  }
  {
    std::vector<std::int8_t> q(kIn * kOut);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::int8_t>(static_cast<int>(i * 37 % 255) - 127);
    std::vector<float> scale(kOut);
    for (std::int64_t o = 0; o < kOut; ++o) scale[o] = 0.01f * static_cast<float>(o + 1);
    quant::Int8ActivationParams act;
    act.smooth_scale = random_values(kIn, 9);
    for (auto& v : act.smooth_scale) v = std::fabs(v) + 0.5f;
    quant::Int8Linear layer(kIn, kOut, q, scale, act, b);
    save(layer);
    Checkpoint ckpt(dir_.string());
    quant::Int8Settings s;
    s.smoothquant = true;
    s.smoothquant_layers = {"l"};
    std::set<std::string> used;
    expect_parts_are_slices([&](const Shard& sh) { return quant::load_int8_linear(ckpt, "l", kIn, kOut, s, used, sh); });
  }
}

TEST(SliceView, PartsOfOneAndTwoDimensionalTensors) {
  std::vector<float> m(3 * 4);
  std::iota(m.begin(), m.end(), 0.0f);
  TensorView v{"t", TensorDType::F32, {3, 4}, reinterpret_cast<const std::byte*>(m.data()), m.size() * 4, "f"};
  std::vector<std::byte> keep;
  TensorView rows = slice_view(v, 0, 1, 3, keep);
  EXPECT_EQ(rows.shape, (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(rows.data, v.data + 16);  // rows stay in the mapping
  EXPECT_TRUE(keep.empty());
  TensorView cols = slice_view(v, 1, 1, 3, keep);
  EXPECT_EQ(cols.shape, (std::vector<std::int64_t>{3, 2}));
  std::vector<float> got(6);
  std::memcpy(got.data(), cols.data, cols.nbytes);
  EXPECT_EQ(got, (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_THROW(slice_view(v, 1, 2, 5, keep), InputError);
  EXPECT_THROW(slice_view(v, 2, 0, 1, keep), InputError);
}
