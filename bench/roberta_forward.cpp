// Forward-pass time of the roberta-base preset (QA head) at batch x seq, fp32 and bf16.
//   roberta_forward_bench [threads=2] [batch=8] [seq=384] [reps=3] [checkpoint dir]
// Without a directory, the preset is written once to $TMPDIR/evalrun-bench-roberta-base (seed 0)
// and reused. Prints ms per forward (best and mean of reps after one warm-up) and the achieved
// GFLOP/s, total and of the linear layers alone (compare the latter with gemm_ceiling), and the
// minor page faults per forward after the warm-up (the buffers should be reused: near 0).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/make_model.hpp"
#include "model/roberta.hpp"

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
      evalrun::make_roberta_checkpoint(dir, "roberta-base", evalrun::RobertaHead::question_answering, 0);
    }
  }
  evalrun::set_compute_threads(threads);

  std::vector<std::int64_t> ids(batch * seq), mask(batch * seq, 1);
  for (std::int64_t i = 0; i < batch * seq; ++i) ids[i] = 3 + (i * 7919) % 50000;
  for (std::int64_t b = 0; b < batch; ++b) ids[b * seq] = 0, ids[b * seq + seq - 1] = 2;

  for (auto dtype : {evalrun::DType::fp32, evalrun::DType::bf16}) {
    auto model = evalrun::RobertaModel::load(dir, dtype, evalrun::Device::cpu);
    const auto& c = model->config();
    const double M = static_cast<double>(batch * seq), H = c.hidden_size, I = c.intermediate_size;
    const double linear_flop = c.num_hidden_layers * 2.0 * M * H * (4 * H + 2 * I);
    const double attn_flop = c.num_hidden_layers * 4.0 * batch * seq * seq * H;
    std::vector<float> start, end;
    model->question_answering(ids.data(), mask.data(), batch, seq, start, end);  // warm-up
    rusage ru0{}, ru1{};
    getrusage(RUSAGE_SELF, &ru0);
    double best = 1e30, total = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      model->question_answering(ids.data(), mask.data(), batch, seq, start, end);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      total += s;
    }
    getrusage(RUSAGE_SELF, &ru1);
    std::printf("%s (compute %s) threads %d batch %lld seq %lld: best %.1f ms, mean %.1f ms; "
                "%.1f GFLOP/s total, %.1f GFLOP/s linear-only; %.0f page faults per forward\n",
                dtype == evalrun::DType::fp32 ? "fp32" : "bf16", model->compute_dtype(), threads,
                static_cast<long long>(batch), static_cast<long long>(seq), best * 1e3, total / reps * 1e3,
                (linear_flop + attn_flop) / best / 1e9, linear_flop / best / 1e9,
                static_cast<double>(ru1.ru_minflt - ru0.ru_minflt) / reps);
  }
  return 0;
}
