// Fuzz target: the sentencepiece wrapper (src/tokenizer/sentencepiece_tokenizer.hpp) and the
// decoder tokenizer on a sentencepiece model (decoder_tokenizer.hpp).
//
// Input, two forms:
//  * raw bytes: a tokenizer.model file (protobuf), loaded and used to encode fixed sample texts;
//  * a "@@ NAME" container (fuzz_util.hpp): a tokenizer directory (tokenizer.model,
//    tokenizer_config.json, special_tokens_map.json, generation_config.json, config.json) and an
//    optional "@@ text" section to encode. Without a tokenizer.model section the directory gets the
//    512-piece stories260K model (fuzz/data/tok512.model), so arbitrary text and arbitrary
//    special-token configuration are fuzzed against a real model.
// Encoded ids must lie in the vocabulary; decoding them (and every special id) must not fail.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz_util.hpp"
#include "tokenizer/decoder_tokenizer.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"

#ifndef EVALRUN_FUZZ_SPM_MODEL
#error "EVALRUN_FUZZ_SPM_MODEL (path of fuzz/data/tok512.model) must be defined"
#endif

using namespace evalrun;

namespace {

const char* const kSamples[] = {
    "Once upon a time, there was a little girl named Lily.",
    "  leading spaces, trailing\ttab\t",
    "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80 <s> </s> <unk>",
    "\xff\xfe invalid \xc3 utf-8",
    "",
};

const std::string& default_model() {
  static const std::string bytes = [] {
    std::ifstream in(EVALRUN_FUZZ_SPM_MODEL, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    if (s.str().empty()) {
      std::fprintf(stderr, "cannot read %s\n", EVALRUN_FUZZ_SPM_MODEL);
      std::abort();
    }
    return s.str();
  }();
  return bytes;
}

void check_ids(const std::vector<std::int64_t>& ids, std::int64_t vocab) {
  for (auto id : ids) FUZZ_CHECK(id >= 0 && id < vocab);
}

void run_model(const std::string& path, const std::vector<std::string>& texts) {
  fuzz::expect_clean([&] {
    const auto sp = SentencePieceTokenizer::from_file(path);
    const std::int64_t vocab = sp.vocab_size();
    for (const auto& t : texts) {
      const auto ids = sp.encode(t);
      check_ids(ids, vocab);
      (void)sp.decode(ids);
    }
    (void)sp.decode({sp.bos_id(), sp.eos_id(), sp.unk_id()});
  });
}

void run_directory(const std::string& dir, const std::vector<std::string>& texts) {
  fuzz::expect_clean([&] {
    const DecoderTokenizer tok = DecoderTokenizer::from_dir(dir);
    for (const auto& t : texts) {
      const auto ids = tok.encode(t);
      (void)tok.decode(ids, true);
      (void)tok.decode(ids, false);
    }
    std::vector<std::int64_t> specials = tok.stop_ids();
    for (std::int64_t id : {tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.unk_id()}) specials.push_back(id);
    (void)tok.decode(specials, false);
    (void)tok.decode(specials, true);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const auto sections = fuzz::split_sections(in);
  std::vector<std::string> texts(std::begin(kSamples), std::end(kSamples));
  if (!sections.container) {
    const std::string path = scratch.write("tokenizer.model", in);
    run_model(path, texts);
    run_directory(scratch.dir().string(), texts);
    return 0;
  }
  for (const auto& [name, body] : sections.files) {
    if (name == "text") {
      texts = {body};
    } else {
      scratch.write(name, body);
    }
  }
  if (!sections.files.count("tokenizer.model")) scratch.write("tokenizer.model", default_model());
  run_model((scratch.dir() / "tokenizer.model").string(), texts);
  run_directory(scratch.dir().string(), texts);
  return 0;
}
