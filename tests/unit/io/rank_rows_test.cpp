// How a rank's rows reach the file: PositionedWriter (direct I/O for the aligned middle of a range,
// the page cache for its ends) and RankRows' writer thread (writes while the rank computes on, runs
// the journal's `then` only once the rows before it are on disk, hands a failed write to the rank).
#include "io/positioned_writer.hpp"
#include "io/rank_rows.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/text_file.hpp"
#include "test_util.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

class RankRowsTest : public evalrun::testing::TempDirTest {
 protected:
  // A file of `bytes` zero bytes (as HDF5 allocates a rows dataset: the space exists before any write).
  std::string zero_file(const std::string& name, std::size_t bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << std::string(bytes, '\0');
    return path;
  }
  static std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // Whether this directory's file system takes O_DIRECT (tmpfs on older kernels does not).
  bool takes_direct_io() const {
    const std::string probe = zero_file("probe", 1);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_DIRECT);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }
};

TEST_F(RankRowsTest, PositionedWritesLandByteExactAtAnyOffsetAndLength) {
  constexpr std::size_t kBlock = PositionedWriter::kBlock;
  // Ranges that start and end inside blocks, on block edges, within one block, and span more than
  // one staging buffer; neighbours share their edge blocks and are written by different writers
  // (two ranks), out of order.
  struct Range {
    std::uint64_t offset;
    std::size_t bytes;
  };
  const std::uint64_t big = PositionedWriter::kStaging + 3 * kBlock + 123;
  const std::vector<Range> ranges{{0, 100},                  {100, kBlock - 100 + 7},     {kBlock + 7, 3 * kBlock},
                                  {4 * kBlock + 7, 1},       {4 * kBlock + 8, 2 * kBlock - 8}, {6 * kBlock, big},
                                  {6 * kBlock + big, kBlock}};
  const std::uint64_t total = ranges.back().offset + ranges.back().bytes + 50;
  const std::string path = zero_file("rows", total);
  std::string want(total, '\0');
  std::vector<std::string> data;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    std::string d(ranges[r].bytes, '\0');
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<char>((i * 31 + r * 7 + 1) % 251 + 1);
    want.replace(ranges[r].offset, d.size(), d);
    data.push_back(std::move(d));
  }
  {
    PositionedWriter even(path), odd(path, /*direct=*/false);
    EXPECT_EQ(even.direct(), takes_direct_io());
    EXPECT_FALSE(odd.direct());
    for (std::size_t r = ranges.size(); r-- > 0;) {
      PositionedWriter& w = r % 2 == 0 ? even : odd;
      ASSERT_EQ(w.write(ranges[r].offset, data[r].data(), data[r].size()), 0) << "range " << r;
    }
    EXPECT_EQ(even.sync(), 0);
    EXPECT_EQ(odd.sync(), 0);
  }
  const std::string got = bytes_of(path);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) FAIL() << "first wrong byte at " << i;
  }
  EXPECT_THROW(PositionedWriter((dir_ / "missing").string()), std::system_error);
}

// Item i of "/rows": 2 rows of 3000 floats (not a multiple of a block), after a 1000-byte header.
RowsLayout two_row_items(const std::string& path, std::size_t items) {
  RowsLayout l;
  l.temp_path = path;
  l.final_path = path + ".final";
  RowsLayout::Dataset d;
  d.path = "/rows";
  d.cols = 3000;
  d.offset = 1000;
  d.first_row = first_rows(std::vector<std::uint64_t>(items, 2));
  l.datasets.push_back(d);
  return l;
}

std::vector<float> item_rows(std::size_t item) {
  std::vector<float> v(6000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(item * 10000 + i) + 0.25F;
  return v;
}

bool item_on_disk(const std::string& path, std::size_t item) {
  const std::vector<float> want = item_rows(item);
  std::vector<float> got(want.size());
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(1000 + item * want.size() * sizeof(float)));
  in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
  return in && got == want;
}

TEST_F(RankRowsTest, TheWriterThreadRunsThenOnlyOnceTheRowsBeforeItAreOnDisk) {
  constexpr std::size_t kItems = 12;
  const std::string path = zero_file("rows", 1000 + kItems * 6000 * sizeof(float));
  const RowsLayout layout = two_row_items(path, kItems);
  std::vector<std::size_t> journaled;  // item indices, as the journal would get them
  std::vector<bool> rows_there;
  {
    RankRows rows;
    rows.write_as_added(layout);
    for (std::size_t item = 0; item < kItems; ++item) {  // batches of 3, in reverse item order
      const std::size_t i = kItems - 1 - item;
      rows.add("/rows", i, item_rows(i));
      if (item % 3 == 2) {
        rows.then([&, batch = std::vector<std::size_t>{i + 2, i + 1, i}] {
          for (std::size_t b : batch) {
            journaled.push_back(b);
            rows_there.push_back(item_on_disk(path, b));
          }
        });
      }
    }
    EXPECT_EQ(rows.items(), 0u);  // nothing kept
    rows.close();
    EXPECT_GT(rows.background_seconds(), 0.0);
  }
  ASSERT_EQ(journaled.size(), kItems);
  for (std::size_t k = 0; k < kItems; ++k) {
    EXPECT_EQ(journaled[k], kItems - 1 - k);
    EXPECT_TRUE(rows_there[k]) << "item " << journaled[k] << " journaled before its rows were written";
  }
  for (std::size_t item = 0; item < kItems; ++item) EXPECT_TRUE(item_on_disk(path, item)) << item;
  // Without write_as_added, then() runs at once (rows kept for after the run).
  RankRows kept;
  bool ran = false;
  kept.then([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST_F(RankRowsTest, AFailedWriteIsThrownToTheRankAndNothingAfterItIsJournaled) {
  // The file size limit makes the writer thread's write of item 2 fail (EFBIG) after items 0 and 1
  // are written; the journal's `then` after item 2 must not run, and the rank gets the error naming
  // the rows.
  const std::string path = zero_file("rows", 1000);
  const RowsLayout layout = two_row_items(path, 4);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 1000 + 2 * 6000 * sizeof(float) + 100;  // items 0 and 1 fit, not item 2
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::vector<int> journaled;
  std::string error;
  {
    RankRows rows;
    rows.write_as_added(layout);
    try {
      rows.add("/rows", 0, item_rows(0));
      rows.add("/rows", 1, item_rows(1));
      rows.then([&] { journaled.push_back(1); });
      rows.add("/rows", 2, item_rows(2));
      rows.then([&] { journaled.push_back(2); });
      rows.add("/rows", 3, item_rows(3));
      rows.close();
    } catch (const WriteError& e) {
      error = e.what();
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(journaled, std::vector<int>{1});
  EXPECT_NE(error.find("/rows rows 4 to 5"), std::string::npos) << error;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_TRUE(item_on_disk(path, 0));
  EXPECT_TRUE(item_on_disk(path, 1));
}

TEST_F(RankRowsTest, RowsKeptUntilTheEndWaitInTheScratchFileNotInMemory) {
  // Items of two datasets (float rows and int64 top-k ids) added out of order, as a generation that
  // stops at EOS does; the layout comes after the run.
  constexpr std::size_t kItems = 5;
  const std::string spill = (dir_ / "run.rank0.rows").string();
  RowsLayout layout = two_row_items(zero_file("rows", 1000 + kItems * 6000 * sizeof(float) + 8 * kItems * 2), kItems);
  RowsLayout::Dataset ids;
  ids.path = "/ids";
  ids.type = RowType::i64;
  ids.cols = 1;
  ids.offset = 1000 + kItems * 6000 * sizeof(float);
  ids.first_row = first_rows(std::vector<std::uint64_t>(kItems, 2));
  layout.datasets.push_back(ids);
  RankRows rows;
  rows.spill_to(spill);
  EXPECT_FALSE(fs::exists(spill));  // made on the first add
  for (std::size_t k = 0; k < kItems; ++k) {
    const std::size_t i = (k * 3) % kItems;  // 0 3 1 4 2
    rows.add("/rows", i, item_rows(i));
    rows.add("/ids", i, std::vector<std::int64_t>{(std::int64_t{1} << 40) + static_cast<std::int64_t>(i), -1});
  }
  rows.close();  // the run's end: the scratch file holds them, memory does not
  EXPECT_EQ(rows.items(), 2 * kItems);
  EXPECT_EQ(rows.bytes(), kItems * (6000 * sizeof(float) + 16));
  ASSERT_TRUE(fs::exists(spill));
  EXPECT_GE(fs::file_size(spill), rows.bytes());
  rows.add("/rows", 9, std::vector<float>(7));  // after the run too (rank 0's journaled records)
  rows.clear();
  EXPECT_FALSE(fs::exists(spill));
  for (std::size_t k = 0; k < kItems; ++k) {
    rows.add("/rows", k, item_rows(k));
    rows.add("/ids", k, std::vector<std::int64_t>{(std::int64_t{1} << 40) + static_cast<std::int64_t>(k), -1});
  }
  rows.write(layout);
  for (std::size_t item = 0; item < kItems; ++item) EXPECT_TRUE(item_on_disk(layout.temp_path, item)) << item;
  std::vector<std::int64_t> got(2 * kItems);
  std::ifstream in(layout.temp_path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(ids.offset));
  in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * 8));
  for (std::size_t i = 0; i < kItems; ++i) {
    EXPECT_EQ(got[2 * i], (std::int64_t{1} << 40) + static_cast<std::int64_t>(i));
    EXPECT_EQ(got[2 * i + 1], -1);
  }
  rows.clear();
  EXPECT_FALSE(fs::exists(spill));
  // A scratch file that cannot take the rows: the error names it and the item.
  RankRows full;
  full.spill_to((dir_ / "no-such-dir" / "run.rank0.rows").string());
  try {
    full.add("/rows", 3, item_rows(3));
    ADD_FAILURE() << "no error";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir/run.rank0.rows"), std::string::npos) << e.what();
  }
}

}  // namespace
