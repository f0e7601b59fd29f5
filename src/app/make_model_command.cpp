#include "app/make_model_command.hpp"

#include <algorithm>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/command_line.hpp"
#include "app/path_guard.hpp"
#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/make_quantized.hpp"
#include "fixtures/tiny_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {
std::vector<std::string> all_presets() {
  std::vector<std::string> names = roberta_presets();
  for (const auto& n : llama_presets()) names.push_back(n);
  return names;
}
}  // namespace

int make_model_command(int argc, char** argv) {
  CLI::App app{"Write a deterministic random checkpoint in Hugging Face format (config.json,\n"
               "model.safetensors, tokenizer files) for demos, tests and benchmarks: encoders (presets tiny,\n"
               "roberta-base, tiny-xlmr, tiny-bert, tiny-distilbert; --head qa|mlm) or decoders (presets tiny-llama,\n"
               "tiny-granite, tiny-mistral, tiny-qwen2, tiny-mixtral, tiny-gemma, tiny-starcoder2, tiny-gpt-bigcode,\n"
               "tiny-gpt2, and the real-shape llama-110m, granite-110m, mistral-110m, qwen2-110m, mixtral-110m,\n"
               "gemma-110m, starcoder2-110m, gpt-bigcode-110m, gpt2-110m).",
               "evalrun make-model"};
  std::string out, head = "qa", preset = "tiny", tokenizer_from;
  std::uint64_t seed = 0;
  int vocab_target = 1000;
  app.add_option("--out", out, "directory to write (created)")->required();
  auto* head_opt = app.add_option("--head", head, "encoder presets: qa (...ForQuestionAnswering) or mlm (...ForMaskedLM)")
      ->check(CLI::IsMember({"qa", "mlm"}));
  app.add_option("--preset", preset,
                 "tiny (RoBERTa, hidden 32, 2 layers), roberta-base (125M parameters), tiny-xlmr, tiny-bert, "
                 "tiny-distilbert (the tiny sizes as XLM-R / BERT / DistilBERT), tiny-llama, tiny-granite, "
                 "tiny-mistral (sliding window 8), tiny-qwen2 (q/k/v biases, tied), tiny-mixtral (4 experts, top 2) "
                 "(hidden 64, 2 layers, GQA), tiny-gemma (head_dim 24, 1 kv head, tied, tanh GELU, (1 + w) RMSNorm), "
                 "tiny-starcoder2 (LayerNorm, biases, sliding window 8), "
                 "tiny-gpt-bigcode (multi-query, learned positions), tiny-gpt2 (Conv1D weights, learned positions), "
                 "llama-110m (hidden 768, 12 layers, vocab 32000) and the same shape of every other family "
                 "(granite-110m, mistral-110m, qwen2-110m, mixtral-110m, gemma-110m, starcoder2-110m, "
                 "gpt-bigcode-110m, gpt2-110m)")
      ->check(CLI::IsMember(all_presets()));
  app.add_option("--seed", seed, "random seed of the weights");
  app.add_option("--tokenizer-from", tokenizer_from,
                 "copy vocab.json/merges.txt (and special-token files) from this directory instead of "
                 "learning a small byte-level BPE");
  app.add_option("--vocab", vocab_target, "vocabulary size of the learned tokenizer")->check(CLI::Range(300, 1300));
  std::int64_t model_vocab = 0;
  auto* model_vocab_opt =
      app.add_option("--model-vocab", model_vocab,
                     "decoder presets: config.json vocab_size (embedding and lm_head rows), padded past the "
                     "tokenizer's ids as real checkpoints are (e.g. 128256 as Llama 3), so result files have a real "
                     "vocabulary's logits")
          ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  // GPTQ: the generated float weights rounded to 4 bits (round-to-nearest per group, no calibration).
  bool gptq = false, desc_act = false, sym = false;
  std::int64_t group_size = 128;
  std::string gptq_format = "gptq";
  app.add_flag("--gptq", gptq, "store the projections as GPTQ 4-bit (AutoGPTQ format, round-to-nearest)");
  auto* gs_opt = app.add_option("--group-size", group_size, "GPTQ group size (-1: one group per output)");
  auto* da_opt = app.add_flag("--desc-act", desc_act, "GPTQ act-order: a random permutation g_idx per layer");
  auto* sym_opt = app.add_flag("--sym", sym, "GPTQ symmetric (zero point 8); default asymmetric");
  auto* fmt_opt = app.add_option("--gptq-format", gptq_format, "GPTQ zero-point format: gptq (v1, stored minus one) or gptq_v2")
      ->check(CLI::IsMember({"gptq", "gptq_v2"}));
  // FP8: e4m3 weights with float32 scales (vLLM's "fp8" checkpoint format).
  bool fp8 = false;
  std::string fp8_scale = "per-tensor", fp8_activations = "dynamic";
  app.add_flag("--fp8", fp8, "store the projections as FP8 e4m3 weights with float32 scales")->excludes("--gptq");
  auto* fp8_scale_opt = app.add_option("--fp8-scale", fp8_scale, "FP8 weight scales: per-tensor or per-channel")
      ->check(CLI::IsMember({"per-tensor", "per-channel"}));
  auto* fp8_act_opt = app.add_option("--fp8-activations", fp8_activations,
                                     "FP8 activation scheme: dynamic (per token) or static (input_scale per layer, "
                                     "calibrated on random token ids)")
      ->check(CLI::IsMember({"dynamic", "static"}));
  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  if (model_vocab_opt->count() > 0) {
    const auto encoders = roberta_presets();
    if (std::find(encoders.begin(), encoders.end(), preset) != encoders.end())
      throw InputError("--model-vocab", "applies only to the decoder presets");
  }
  if (!gptq) {
    for (auto* opt : {gs_opt, da_opt, sym_opt, fmt_opt}) {
      if (opt->count() > 0) throw InputError(opt->get_name(), "applies only with --gptq");
    }
  }
  if (!fp8) {
    for (auto* opt : {fp8_scale_opt, fp8_act_opt}) {
      if (opt->count() > 0) throw InputError(opt->get_name(), "applies only with --fp8");
    }
  }
  quant::Fp8Settings fp8_settings;
  fp8_settings.static_activations = fp8_activations == "static";
  quant::GptqSettings gptq_settings;
  gptq_settings.group_size = group_size;
  gptq_settings.desc_act = desc_act;
  gptq_settings.sym = sym;
  gptq_settings.v2 = gptq_format == "gptq_v2";
  if (gptq && group_size != -1 && group_size <= 0) {
    throw InputError("--group-size", "must be -1 or positive, got " + std::to_string(group_size));
  }
  if ((gptq || fp8) && preset == "tiny-gpt2") {
    throw InputError(gptq ? "--gptq" : "--fp8", "tiny-gpt2's Conv1D layers have no quantized format in evalrun");
  }
  auto quantize = [&] {
    if (gptq) {
      make_gptq_checkpoint(out, gptq_settings, seed);
      std::printf("quantized %s: %s\n", out.c_str(), gptq_settings.describe().c_str());
    } else if (fp8) {
      make_fp8_checkpoint(out, fp8_settings, fp8_scale == "per-channel", seed);
      std::printf("quantized %s: %s, %s weight scales\n", out.c_str(), fp8_settings.describe().c_str(),
                  fp8_scale.c_str());
    }
  };
  namespace fs = std::filesystem;
  {
    PathGuard guard;
    guard.model_dir("--tokenizer-from", tokenizer_from);
    for (const char* name : {"config.json", "model.safetensors", "generation_config.json", "vocab.json", "merges.txt",
                             "tokenizer.json", "special_tokens_map.json", "tokenizer_config.json"})
      guard.output("--out", (fs::path(out) / name).string());
    guard.check();
  }
  fs::create_directories(out);
  if (tokenizer_from.empty()) {
    write_tiny_bpe_tokenizer(out, vocab_target);
  } else {
    for (const char* name : {"vocab.json", "merges.txt", "tokenizer.json", "special_tokens_map.json",
                             "tokenizer_config.json"}) {
      const fs::path src = fs::path(tokenizer_from) / name;
      if (fs::exists(src)) fs::copy_file(src, fs::path(out) / name, fs::copy_options::overwrite_existing);
    }
  }
  const auto tokenizer = ByteLevelBPE::from_dir(out);
  const std::vector<std::string> encoders = roberta_presets();
  const bool decoder = std::find(encoders.begin(), encoders.end(), preset) == encoders.end();
  if (decoder) {
    if (head_opt->count() > 0) {
      throw InputError("--head", "applies only to the encoder presets (tiny, roberta-base, tiny-xlmr, tiny-bert, tiny-distilbert)");
    }
    // The real-shape presets (not tiny-*) keep a real vocabulary (32000) so their cost is a real model's.
    const bool real_shape = preset.rfind("tiny-", 0) != 0;
    std::int64_t vocab = real_shape ? std::max<std::int64_t>(32000, tokenizer.vocab_size()) : tokenizer.vocab_size();
    if (model_vocab_opt->count() > 0) {
      if (model_vocab < tokenizer.vocab_size())
        throw InputError("--model-vocab", std::to_string(model_vocab) + " is below the tokenizer's " +
                                              std::to_string(tokenizer.vocab_size()) + " ids");
      vocab = model_vocab;
    }
    // The learned tokenizer's ids (<s> 0, <pad> 1, </s> 2) go into config.json and generation_config.json.
    const auto& sp = tokenizer.special();
    make_llama_checkpoint(out, preset, seed, vocab, SpecialTokenIds{sp.bos, sp.eos, sp.pad});
    std::printf("wrote %s: %s (vocab %lld, seed %llu)\n", out.c_str(), preset.c_str(), static_cast<long long>(vocab),
                static_cast<unsigned long long>(seed));
    quantize();
    return 0;
  }
  // The roberta-base preset keeps its real vocabulary size (50265) so its cost is the real model's.
  const std::int64_t vocab = preset == "roberta-base" ? std::max<std::int64_t>(50265, tokenizer.vocab_size())
                                                      : tokenizer.vocab_size();
  make_roberta_checkpoint(out, preset, head == "qa" ? EncoderHead::question_answering : EncoderHead::masked_lm, seed,
                          vocab);
  std::printf("wrote %s: encoder %s (%s head, vocab %lld, seed %llu)\n", out.c_str(), preset.c_str(), head.c_str(),
              static_cast<long long>(vocab), static_cast<unsigned long long>(seed));
  quantize();
  return 0;
}

}  // namespace evalrun
