// Forward-pass time of the roberta-base preset (QA head) at batch x seq: fp32, bf16 and INT8 W8A8
// (the fp32 model quantized directly: per_token activations, and per_tensor_symm with SmoothQuant
// calibrated on the benchmark's own input).
//   roberta_forward_bench [threads=2] [batch=8] [seq=384] [reps=3] [checkpoint dir]
//                         [variants=fp32,bf16,int8,int8-static]
// (also int8-attn16, int8-static-attn16: the same with quantization.attention = "bf16", the attention
// products on bfloat16 operands; AVX512-BF16 CPUs only)
// Without a directory, the preset is written once to $TMPDIR/evalrun-bench-roberta-base (seed 0)
// and reused. Measures first, in the same run, the GEMM ceiling of each precision (bench/ceiling.hpp:
// the fastest primitive for one layer's four products at batch x seq rows), then prints per variant
// ms per forward (best and mean of reps after one warm-up, the variants taking turns), features/s,
// the achieved GFLOP/s (GOP/s for INT8), total and of the linear layers alone, the linear-only rate's
// share of the precision's ceiling, the minor page faults per forward after the warm-up (the buffers
// should be reused: near 0), for INT8 the speed-up over fp32 and the integer GEMM implementation, and
// (one more forward with every linear layer timed) the time in the linear layers against the rest,
// and each variant's largest start / end logit difference from fp32's and every row whose best answer
// span differs from fp32's, with fp32's margin between the two spans (a change float error explains
// has a margin of at most twice that largest difference; the others are counted).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu.hpp"
#include "ceiling.hpp"
#include "fixtures/make_model.hpp"
#include "model/roberta.hpp"
#include "ops/gemm.hpp"
#include "quant/int8.hpp"

namespace {

// Times the layer it wraps (where the forward pass spends its time: linear layers or the rest).
class TimedLinear final : public evalrun::quant::Linear {
 public:
  TimedLinear(const evalrun::quant::Linear* like, double* seconds)
      : Linear(like->in_features(), like->out_features()), seconds_(seconds) {}
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    const auto t0 = std::chrono::steady_clock::now();
    inner->forward(x, M, ldx, y, ldy, alpha, beta);
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<float> weight_f32() const override { return inner->weight_f32(); }
  std::vector<float> bias_f32() const override { return inner->bias_f32(); }
  std::size_t resident_bytes() const override { return inner->resident_bytes(); }
  std::string describe() const override { return inner->describe(); }
  void export_tensors(const std::string& p, std::vector<evalrun::TensorToWrite>& out) const override {
    inner->export_tensors(p, out);
  }

  evalrun::quant::LinearPtr inner;

 private:
  double* seconds_;
};

// The answer span of one row as the QA post-processing picks it from the logits: the best start +
// end score with start <= end and at most 30 tokens (task.max_answer_length's default).
struct Span {
  std::int64_t start = 0, end = 0;
  double score = -1e300;
};
Span best_span(const float* start, const float* end, std::int64_t seq) {
  Span best;
  for (std::int64_t s = 0; s < seq; ++s) {
    for (std::int64_t e = s; e < std::min(seq, s + 30); ++e) {
      const double score = static_cast<double>(start[s]) + end[e];
      if (score > best.score) best = {s, e, score};
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::int64_t batch = argc > 2 ? std::atoll(argv[2]) : 8;
  const std::int64_t seq = argc > 3 ? std::atoll(argv[3]) : 384;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 3;
  std::string dir = argc > 5 ? argv[5] : "";
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / "evalrun-bench-roberta-base").string();
    if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
      std::printf("writing roberta-base preset to %s\n", dir.c_str());
      evalrun::make_roberta_checkpoint(dir, "roberta-base", evalrun::EncoderHead::question_answering, 0);
    }
  }
  evalrun::set_compute_threads(threads);
  evalrun::bench::print_cpu();

  std::vector<std::int64_t> ids(batch * seq), mask(batch * seq, 1);
  for (std::int64_t i = 0; i < batch * seq; ++i) ids[i] = 3 + (i * 7919) % 50000;
  for (std::int64_t b = 0; b < batch; ++b) ids[b * seq] = 0, ids[b * seq + seq - 1] = 2;

  const std::string variants = argc > 6 ? argv[6] : "fp32,bf16,int8,int8-static";
  auto wanted = [&](const std::string& v) { return ("," + variants + ",").find("," + v + ",") != std::string::npos; };
  struct Run {
    std::string variant;
    std::unique_ptr<evalrun::RobertaModel> model;
    double best = 1e30, total = 0, linear_s = 0, timed_s = 0;
    long faults = 0;
    std::vector<float> start, end;  // the warm-up forward's logits
  };
  std::vector<Run> runs;
  for (const std::string variant : {"fp32", "bf16", "int8", "int8-static", "int8-attn16", "int8-static-attn16"}) {
    if (!wanted(variant)) continue;
    const auto dtype = variant == "bf16" ? evalrun::DType::bf16 : evalrun::DType::fp32;
    auto model = evalrun::RobertaModel::load({dir, dtype, "cpu"});
    if (variant.rfind("int8", 0) == 0) {
      // Direct quantization as a run does it; the static variant calibrates on the benchmark input.
      evalrun::quant::Int8Settings s;
      if (variant.rfind("int8-static", 0) == 0) {
        s.activations = evalrun::quant::Int8Activations::per_tensor_symm;
        s.smoothquant = true;
      }
      auto replace = [&](std::size_t i, evalrun::quant::LinearPtr l) { return model->replace_linear(i, std::move(l)); };
      auto calibrate = [&] {
        std::vector<float> st, en;
        model->question_answering(ids.data(), mask.data(), 1, seq, st, en);
      };
      auto sites = evalrun::quant::quantize_sites_int8(model->linear_sites(), replace, calibrate, s);
      for (std::size_t i = 0; i < sites.size(); ++i) {
        model->replace_linear(i, evalrun::quant::concat_outputs(std::move(sites[i].parts)));
      }
    }
    if (variant.ends_with("-attn16")) model->use_bf16_attention_products();
    std::vector<float> start, end;
    model->question_answering(ids.data(), mask.data(), batch, seq, start, end);  // warm-up
    runs.push_back({variant, std::move(model), 1e30, 0, 0, 0, 0, start, end});
  }
  // The variants take turns, so a change in the machine's load during the benchmark affects all alike
  // and the ratios are measured in one run.
  std::vector<float> start, end;
  for (int r = 0; r < reps; ++r) {
    for (auto& run : runs) {
      rusage ru0{}, ru1{};
      getrusage(RUSAGE_SELF, &ru0);
      auto t0 = std::chrono::steady_clock::now();
      run.model->question_answering(ids.data(), mask.data(), batch, seq, start, end);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      getrusage(RUSAGE_SELF, &ru1);
      run.best = std::min(run.best, s);
      run.total += s;
      run.faults += ru1.ru_minflt - ru0.ru_minflt;
    }
  }
  // One more forward with every linear layer timed: how the time splits between the linear layers
  // (for INT8: activation quantization, integer product, dequantization) and the rest (attention,
  // softmax, GELU, LayerNorm, embeddings). Not on the torch (bf16) path.
  for (auto& run : runs) {
    if (run.variant == "bf16") continue;
    for (std::size_t i = 0; i < run.model->linear_sites().size(); ++i) {
      auto timed = std::make_unique<TimedLinear>(run.model->linear_sites()[i].layer, &run.linear_s);
      TimedLinear* raw = timed.get();
      raw->inner = run.model->replace_linear(i, std::move(timed));
    }
    const auto t0 = std::chrono::steady_clock::now();
    run.model->question_answering(ids.data(), mask.data(), batch, seq, start, end);
    run.timed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  if (runs.empty()) return 0;
  const auto& cfg = runs.front().model->config();
  const auto ceil = evalrun::bench::measure_layer_ceilings(batch * seq, cfg.hidden_size, cfg.intermediate_size, reps);
  std::printf("ceilings (one layer's products at %lld rows, fastest primitive): fp32 %.1f GFLOP/s, bf16 %.1f "
              "GFLOP/s, int8 %.1f GOP/s\n",
              static_cast<long long>(batch * seq), ceil.fp32 / 1e9, ceil.bf16 / 1e9, ceil.int8 / 1e9);
  double fp32_best = 0;
  for (const auto& run : runs) {
    const auto& c = run.model->config();
    const double ceiling = run.variant == "bf16" ? ceil.bf16 : run.variant == "fp32" ? ceil.fp32 : ceil.int8;
    const double M = static_cast<double>(batch * seq), H = c.hidden_size, I = c.intermediate_size;
    const double linear_flop = c.num_hidden_layers * 2.0 * M * H * (4 * H + 2 * I);
    const double attn_flop = c.num_hidden_layers * 4.0 * batch * seq * seq * H;
    std::printf("%s (compute %s) threads %d batch %lld seq %lld: best %.1f ms, mean %.1f ms, %.2f features/s; "
                "%.1f G/s total, %.1f G/s linear-only = %.0f%% of the ceiling; %.0f page faults per forward",
                run.variant.c_str(), run.model->compute_dtype(), threads, static_cast<long long>(batch),
                static_cast<long long>(seq), run.best * 1e3, run.total / reps * 1e3, batch / run.best,
                (linear_flop + attn_flop) / run.best / 1e9, linear_flop / run.best / 1e9,
                100.0 * linear_flop / run.best / ceiling, static_cast<double>(run.faults) / reps);
    if (run.variant == "fp32") fp32_best = run.best;
    if (run.variant.rfind("int8", 0) == 0 && fp32_best > 0) {
      std::printf("; %.2fx fp32 (%s)", fp32_best / run.best, evalrun::ops::igemm_implementation().c_str());
    }
    if (run.variant != "fp32" && !runs.front().start.empty() && runs.front().variant == "fp32") {
      const Run& ref = runs.front();
      double worst = 0;
      for (std::int64_t i = 0; i < batch * seq; ++i) {
        worst = std::max({worst, static_cast<double>(std::abs(run.start[i] - ref.start[i])),
                          static_cast<double>(std::abs(run.end[i] - ref.end[i]))});
      }
      // A span's score is two logits, so no change of answer is explained by float error unless fp32's
      // best span beat the new one by at most twice the largest logit difference.
      std::string changed;
      int unexplained = 0, n_changed = 0;
      for (std::int64_t b = 0; b < batch; ++b) {
        const Span want = best_span(ref.start.data() + b * seq, ref.end.data() + b * seq, seq);
        const Span got = best_span(run.start.data() + b * seq, run.end.data() + b * seq, seq);
        if (got.start == want.start && got.end == want.end) continue;
        const double margin = want.score - (static_cast<double>(ref.start[b * seq + got.start]) + ref.end[b * seq + got.end]);
        unexplained += margin > 2 * worst;
        ++n_changed;
        changed += " row " + std::to_string(b) + " [" + std::to_string(want.start) + ", " + std::to_string(want.end) +
                   "] -> [" + std::to_string(got.start) + ", " + std::to_string(got.end) + "], fp32 margin " +
                   std::to_string(margin) + ";";
      }
      std::printf("; logits vs fp32: max |diff| %.4f; best span changed in %d of %lld rows%s%s", worst, n_changed,
                  static_cast<long long>(batch), changed.empty() ? "" : ":", changed.c_str());
      if (unexplained > 0) std::printf(" %d with a margin above 2x the max |diff|", unexplained);
    }
    if (run.timed_s > 0) {
      std::printf("; linear layers %.0f of %.0f ms (%.1f GFLOP/s)", run.linear_s * 1e3, run.timed_s * 1e3,
                  linear_flop / run.linear_s / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
