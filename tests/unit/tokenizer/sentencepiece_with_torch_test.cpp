#include <gtest/gtest.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>

#include "common/errors.hpp"
#include "test_util.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"

namespace at {
int get_num_threads();  // from libtorch: referencing it makes the test binary load libtorch for real
}

using namespace evalrun;

TEST(SentencePiece, LoadsBesideLibtorch) {
  EXPECT_GE(at::get_num_threads(), 1);  // libtorch is loaded and initialised in this process
  EVALRUN_REQUIRE_SHARED_DATA(data);
  auto sp = SentencePieceTokenizer::from_file(data + "/models/stories260K/tokenizer.model");
  EXPECT_EQ(sp.vocab_size(), 512);
  EXPECT_EQ(sp.bos_id(), 1);
  EXPECT_EQ(sp.eos_id(), 2);
  // the shared data README: "Once upon a time" -> [1, 403, 407, 261, 378] with BOS
  EXPECT_EQ(sp.encode("Once upon a time"), (std::vector<std::int64_t>{403, 407, 261, 378}));
  EXPECT_EQ(sp.decode({403, 407, 261, 378}), "Once upon a time");
}

TEST(SentencePiece, MissingOrBadModelIsInputError) {
  EXPECT_THROW(SentencePieceTokenizer::from_file("/nonexistent/tokenizer.model"), InputError);
  auto dir = evalrun::testing::make_temp_dir("evalrun-sp");
  std::ofstream(dir / "tokenizer.model") << "not a protobuf";
  try {
    SentencePieceTokenizer::from_file((dir / "tokenizer.model").string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.model"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
