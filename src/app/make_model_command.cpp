#include "app/make_model_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/errors.hpp"
#include "model/make_model.hpp"
#include "tokenizer/tiny_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {

int make_model_command(int argc, char** argv) {
  CLI::App app{"Write a deterministic random RoBERTa checkpoint in Hugging Face format (config.json,\n"
               "model.safetensors, tokenizer files) for demos, tests and benchmarks.",
               "evalrun make-model"};
  std::string out, head = "qa", preset = "tiny", tokenizer_from;
  std::uint64_t seed = 0;
  int vocab_target = 1000;
  app.add_option("--out", out, "directory to write (created)")->required();
  app.add_option("--head", head, "qa (RobertaForQuestionAnswering) or mlm (RobertaForMaskedLM)")
      ->check(CLI::IsMember({"qa", "mlm"}));
  app.add_option("--preset", preset, "tiny (hidden 32, 2 layers) or roberta-base (125M parameters)")
      ->check(CLI::IsMember({"tiny", "roberta-base"}));
  app.add_option("--seed", seed, "random seed of the weights");
  app.add_option("--tokenizer-from", tokenizer_from,
                 "copy vocab.json/merges.txt (and special-token files) from this directory instead of "
                 "learning a small byte-level BPE");
  app.add_option("--vocab", vocab_target, "vocabulary size of the learned tokenizer")->check(CLI::Range(300, 1300));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitBadInput;
  }
  namespace fs = std::filesystem;
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
  // The roberta-base preset keeps its real vocabulary size (50265) so its cost is the real model's.
  const std::int64_t vocab = preset == "roberta-base" ? std::max<std::int64_t>(50265, tokenizer.vocab_size())
                                                      : tokenizer.vocab_size();
  make_roberta_checkpoint(out, preset, head == "qa" ? RobertaHead::question_answering : RobertaHead::masked_lm, seed,
                          vocab);
  std::printf("wrote %s: RoBERTa %s (%s head, vocab %lld, seed %llu)\n", out.c_str(), preset.c_str(), head.c_str(),
              static_cast<long long>(vocab), static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace evalrun
