#include <gtest/gtest.h>

#include "common/errors.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"

using namespace evalrun;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // two blocks
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>('a' + i % 26);
  Sha256 h;
  for (size_t i = 0; i < s.size(); i += 37) h.update(std::string_view(s).substr(i, 37));
  EXPECT_EQ(h.hex_digest(), sha256_hex(s));
}

TEST(Text, ClosestMatchSuggestsTypos) {
  std::vector<std::string> keys = {"batch_size", "doc_stride", "max_seq_length"};
  EXPECT_EQ(closest_match("batchsize", keys), "batch_size");
  EXPECT_EQ(closest_match("max_seq_len", keys), "max_seq_length");
  EXPECT_EQ(closest_match("completely_different", keys), "");
}

TEST(Errors, InputErrorCarriesWhere) {
  InputError e("a.toml:3", "bad value");
  EXPECT_STREQ(e.what(), "a.toml:3: bad value");
  EXPECT_EQ(e.where(), "a.toml:3");
}

TEST(Text, ReadFileMissingNamesPath) {
  try {
    read_file("/nonexistent/file.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/file.json"), std::string::npos);
  }
}
