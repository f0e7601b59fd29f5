// The resume journal: records read back in order, a torn tail (a crash mid-write) is dropped and then
// overwritten by the next writer, a damaged record in the middle is an error naming the offset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/errors.hpp"
#include "io/journal.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;

namespace {

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::string& b) { std::ofstream(p, std::ios::binary | std::ios::trunc) << b; }

TEST(Journal, Crc32OfKnownInput) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the standard check value of CRC-32/ISO-HDLC
  EXPECT_EQ(crc32("", 0), 0u);
  // Every length and alignment agrees with the plain bit-by-bit definition, also when chained.
  auto bitwise = [](const std::string& s) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
  };
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>((i * 131 + 7) & 0xFF);
  for (std::size_t off = 0; off < 8; ++off) {
    for (std::size_t n = 0; off + n <= text.size(); n += 13) {
      const std::string part = text.substr(off, n);
      EXPECT_EQ(crc32(part.data(), part.size()), bitwise(part)) << off << "+" << n;
      const std::size_t half = n / 2;
      EXPECT_EQ(crc32(part.data() + half, n - half, crc32(part.data(), half)), bitwise(part)) << off << "+" << n;
    }
  }
}

TEST(Journal, RecordsReadBackAndAppendAcrossWriters) {
  const fs::path dir = evalrun::testing::make_temp_dir("evalrun-journal");
  const std::string path = (dir / "rank0.journal").string();
  EXPECT_TRUE(read_journal(path).items.empty());  // missing: empty
  {
    JournalWriter w(path);
    w.add(7, "seven");
    w.add(2, std::string("t\0o", 3));
    w.flush();
    w.add(9, "");  // flushed by the destructor
  }
  {
    JournalWriter w(path);  // a later run appends
    w.add(11, std::string(100000, 'x'));
  }
  const auto c = read_journal(path);
  ASSERT_EQ(c.items.size(), 4u);
  EXPECT_EQ(c.items.at(7), "seven");
  EXPECT_EQ(c.items.at(2), std::string("t\0o", 3));
  EXPECT_EQ(c.items.at(9), "");
  EXPECT_EQ(c.items.at(11).size(), 100000u);
  EXPECT_EQ(c.torn_bytes, 0u);
  fs::remove_all(dir);
}

TEST(Journal, TornTailIsDroppedAndOverwritten) {
  const fs::path dir = evalrun::testing::make_temp_dir("evalrun-journal");
  const fs::path path = dir / "j";
  {
    JournalWriter w(path.string());
    w.add(1, "one");
    w.add(2, "two");
  }
  const std::string full = bytes(path);
  // every cut inside the last record loses that record only
  const std::size_t last = full.size() - (16 + 3 + 4);
  for (std::size_t cut = last + 1; cut < full.size(); ++cut) {
    write_bytes(path, full.substr(0, cut));
    const auto c = read_journal(path.string());
    ASSERT_EQ(c.items.size(), 1u) << cut;
    EXPECT_EQ(c.items.at(1), "one");
    EXPECT_EQ(c.good_bytes, last);
    EXPECT_EQ(c.torn_bytes, cut - last);
  }
  {
    JournalWriter w(path.string());  // cuts the torn tail, then appends
    w.add(3, "three");
  }
  const auto c = read_journal(path.string());
  EXPECT_EQ(c.items.size(), 2u);
  EXPECT_EQ(c.items.at(3), "three");
  EXPECT_EQ(c.torn_bytes, 0u);
  fs::remove_all(dir);
}

TEST(Journal, DamagedMiddleRecordAndForeignFilesAreErrors) {
  const fs::path dir = evalrun::testing::make_temp_dir("evalrun-journal");
  const fs::path path = dir / "j";
  {
    JournalWriter w(path.string());
    w.add(1, "one");
    w.add(2, "two");
  }
  std::string b = bytes(path);
  b[4 + 16] ^= 0x01;  // first payload byte
  write_bytes(path, b);
  try {
    read_journal(path.string());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("byte 4"), std::string::npos) << e.what();
  }
  write_bytes(path, "not a journal at all");
  EXPECT_THROW(read_journal(path.string()), InputError);
  fs::remove_all(dir);
}

}  // namespace
