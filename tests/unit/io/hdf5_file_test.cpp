#include "io/hdf5_file.hpp"
#include "io/positioned_writer.hpp"
#include "io/rank_rows.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "test_util.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Chunk dims of a dataset (empty when contiguous) and whether shuffle + deflate are on, via the C API.
struct Layout {
  std::vector<hsize_t> chunk;
  bool shuffle = false;
  bool deflate = false;
};
Layout layout_of(const std::string& file, const std::string& ds) {
  Layout l;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  hid_t p = H5Dget_create_plist(d);
  if (H5Pget_layout(p) == H5D_CHUNKED) {
    l.chunk.resize(8);
    l.chunk.resize(static_cast<std::size_t>(H5Pget_chunk(p, 8, l.chunk.data())));
  }
  const int nf = H5Pget_nfilters(p);
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0;
    size_t nelmts = 0;
    unsigned config = 0;
    const H5Z_filter_t id = H5Pget_filter2(p, static_cast<unsigned>(i), &flags, &nelmts, nullptr, 0, nullptr, &config);
    if (id == H5Z_FILTER_SHUFFLE) l.shuffle = true;
    if (id == H5Z_FILTER_DEFLATE) l.deflate = true;
  }
  H5Pclose(p);
  H5Dclose(d);
  H5Fclose(f);
  return l;
}

class H5Test : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = evalrun::testing::make_temp_dir("io-hdf5"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(H5Test, WriteEveryKindAndReadBack) {
  const auto path = (dir_ / "sub" / "dir" / "all.h5").string();  // parent dirs are created
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, std::numeric_limits<float>::max()};
  const std::vector<double> f64 = {1.0 / 3.0, -1e300};
  const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::min(), -1, 0, 50264};
  const std::vector<std::int32_t> i32 = {-7, 2147483647};
  const std::vector<std::uint64_t> u64 = {0, std::numeric_limits<std::uint64_t>::max()};
  // binary16: 0.5, -2.25, 65504 (max), 1, -0, smallest subnormal 2^-24, +inf
  const std::vector<std::uint16_t> f16 = {0x3800, 0xC080, 0x7BFF, 0x3C00, 0x8000, 0x0001, 0x7C00};
  const std::vector<std::string> strs = {"abc", "", "Köln — Düsseldorf", "日本語"};
  const std::vector<std::vector<std::int64_t>> rag_i = {{1, 2, 3}, {}, {4}};
  const std::vector<std::vector<float>> rag_f = {{}, {0.5f}, {1.0f, 2.0f}};
  {
    H5Writer w(path);
    w.write("/data/f32", f32, {2, 3});
    w.write("/data/f64", f64);
    w.write("/data/i64", i64);
    w.write("/data/i32", i32);
    w.write("/data/u64", u64);
    w.write_f16("/data/f16", f16, {7});
    w.write_strings("/ids", strs);
    w.write_strings("/no_ids", {});
    w.write_ragged("/ragged/ints", rag_i);
    w.write_ragged("/ragged/floats", rag_f);
    w.create_group("/empty/group");
    w.create_group("/empty/group");  // idempotent
    w.set_attr("/", "name", std::string("run — α"));
    w.set_attr("/", "topk", std::int64_t{5});
    w.set_attr("/", "f1", 5.5060);
    w.set_attr("/data/f32", "unit", std::string("logit"));
    w.set_attr("/empty/group", "n", std::int64_t{-3});
    w.set_attr("/", "topk", std::int64_t{6});  // replaces
    w.commit();
  }
  H5Reader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.read_f32("/data/f32"), f32);
  EXPECT_EQ(r.shape("/data/f32"), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(r.read_f64("/data/f64"), f64);
  EXPECT_EQ(r.read_i64("/data/i64"), i64);
  EXPECT_EQ(r.read_i64("/data/i32"), (std::vector<std::int64_t>{-7, 2147483647}));
  EXPECT_EQ(r.read_u64("/data/u64"), u64);
  const auto half = r.read_f32("/data/f16");
  ASSERT_EQ(half.size(), 7u);
  EXPECT_EQ(half[0], 0.5f);
  EXPECT_EQ(half[1], -2.25f);
  EXPECT_EQ(half[2], 65504.0f);
  EXPECT_EQ(half[3], 1.0f);
  EXPECT_EQ(half[4], 0.0f);
  EXPECT_TRUE(std::signbit(half[4]));
  EXPECT_EQ(half[5], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(half[6]) && half[6] > 0);
  EXPECT_EQ(r.read_f64("/data/f16")[1], -2.25);
  EXPECT_EQ(r.read_strings("/ids"), strs);
  EXPECT_TRUE(r.read_strings("/no_ids").empty());
  EXPECT_EQ(r.read_ragged_i64("/ragged/ints"), rag_i);
  EXPECT_EQ(r.read_ragged_f32("/ragged/floats"), rag_f);
  EXPECT_EQ(r.read_u64("/ragged/ints/offsets"), (std::vector<std::uint64_t>{0, 3, 3, 4}));
  EXPECT_EQ(r.children("/"), (std::vector<std::string>{"data", "empty", "ids", "no_ids", "ragged"}));
  EXPECT_EQ(r.children("/data"), (std::vector<std::string>{"f16", "f32", "f64", "i32", "i64", "u64"}));
  EXPECT_TRUE(r.children("/empty/group").empty());
  EXPECT_TRUE(r.exists("/"));
  EXPECT_TRUE(r.exists("/data/f32"));
  EXPECT_TRUE(r.exists("data/f32"));
  EXPECT_FALSE(r.exists("/data/nope"));
  EXPECT_FALSE(r.exists("/nope/deeper/still"));
  EXPECT_FALSE(r.exists("/data/f32/below_a_dataset"));
  EXPECT_EQ(r.attr_string("/", "name"), "run — α");
  EXPECT_EQ(r.attr_int("/", "topk"), 6);
  EXPECT_EQ(r.attr_double("/", "f1"), 5.5060);
  EXPECT_EQ(r.attr_double("/", "topk"), 6.0);  // integers widen to double
  EXPECT_EQ(r.attr_string("/data/f32", "unit"), "logit");
  EXPECT_EQ(r.attr_int("/empty/group", "n"), -3);
  EXPECT_TRUE(r.has_attr("/", "f1"));
  EXPECT_FALSE(r.has_attr("/", "f2"));
  EXPECT_EQ(r.attr_names("/"), (std::vector<std::string>{"f1", "name", "topk"}));
}

TEST_F(H5Test, LargeDatasetsAreChunkedAndCompressed) {
  const auto path = (dir_ / "big.h5").string();
  std::vector<float> rows(10 * 70000);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 1000) * 0.25f;
  std::vector<std::int64_t> flat(300000);
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<std::int64_t>(i);
  std::vector<std::uint16_t> half(5000, 0x3C00);
  {
    H5Writer w(path);
    w.write("/rows_auto", rows, {10, 70000});
    w.write("/rows_fixed", rows, {10, 70000}, 4);
    w.write("/flat", flat);
    w.write_f16("/half", half, {50, 100}, 7);
    w.write("/small", std::vector<float>(4096, 1.0f));  // exactly kChunkMin: contiguous
    w.commit();
  }
  const auto a = layout_of(path, "/rows_auto");
  EXPECT_EQ(a.chunk, (std::vector<hsize_t>{3, 70000}));  // 280 kB rows -> 3 rows per ~1 MiB
  EXPECT_TRUE(a.shuffle);
  EXPECT_TRUE(a.deflate);
  EXPECT_EQ(layout_of(path, "/rows_fixed").chunk, (std::vector<hsize_t>{4, 70000}));
  EXPECT_EQ(layout_of(path, "/flat").chunk, (std::vector<hsize_t>{131072}));
  EXPECT_EQ(layout_of(path, "/half").chunk, (std::vector<hsize_t>{7, 100}));
  const auto s = layout_of(path, "/small");
  EXPECT_TRUE(s.chunk.empty());
  EXPECT_FALSE(s.deflate);
  H5Reader r(path);
  EXPECT_EQ(r.read_f32("/rows_auto"), rows);
  EXPECT_EQ(r.read_f32("/rows_fixed"), rows);
  EXPECT_EQ(r.read_i64("/flat"), flat);
  EXPECT_EQ(r.read_f32("/half"), std::vector<float>(5000, 1.0f));
  EXPECT_LT(fs::file_size(path), 2u * rows.size() * sizeof(float) / 4);  // compression did something
}

// Row blocks are whole chunks however small the block asked for: every row comes back as the whole
// read gives it, in order, backwards and across block ends, for chunked, contiguous and f16 datasets.
TEST_F(H5Test, RowsReadBlocksOfWholeChunks) {
  const auto path = (dir_ / "rows.h5").string();
  const std::int64_t n = 23, cols = 300;
  std::vector<float> values(static_cast<std::size_t>(n * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  std::vector<std::int64_t> ids(values.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i) * 3 - 100;
  std::vector<std::uint16_t> half(static_cast<std::size_t>(n * 4), 0x4000);  // 2.0
  {
    H5Writer w(path);
    w.write("/chunked", values, {n, cols}, /*row_chunk=*/4);
    w.write("/ids", ids, {n, cols}, 5);
    w.write("/small", std::vector<float>(values.begin(), values.begin() + 10 * 4), {10, 4});  // contiguous
    w.write_f16("/half", half, {n, 4}, 3);
    w.write("/flat", values);
    w.commit();
  }
  H5Reader r(path);
  const std::size_t one_row = cols * sizeof(float);
  H5Rows<float> chunked(r, "/chunked", one_row);  // asks for 1 row, gets a whole chunk of 4
  EXPECT_EQ(chunked.rows(), n);
  EXPECT_EQ(chunked.cols(), cols);
  EXPECT_EQ(chunked.block_rows(), 4);
  H5Rows<float> wide(r, "/chunked", 9 * one_row);  // 9 rows fit: two whole chunks
  EXPECT_EQ(wide.block_rows(), 8);
  auto expect_row = [&](H5Rows<float>& rows, std::int64_t i) {
    const float* got = rows.row(i);
    for (std::int64_t j = 0; j < cols; ++j) ASSERT_EQ(got[j], values[static_cast<std::size_t>(i * cols + j)]) << i;
  };
  for (std::int64_t i = 0; i < n; ++i) expect_row(chunked, i);
  for (std::int64_t i = n - 1; i >= 0; --i) expect_row(wide, i);
  H5Rows<std::int64_t> id_rows(r, "/ids", 1);
  EXPECT_EQ(id_rows.block_rows(), 5);
  for (std::int64_t i = 0; i < n; i += 2)
    EXPECT_EQ(id_rows.row(i)[cols - 1], ids[static_cast<std::size_t>(i * cols + cols - 1)]);
  H5Rows<float> small(r, "/small", 3 * 4 * sizeof(float));
  EXPECT_EQ(small.block_rows(), 3);
  EXPECT_EQ(small.row(9)[3], values[39]);
  H5Rows<float> half_rows(r, "/half", 1);
  EXPECT_EQ(half_rows.row(n - 1)[0], 2.0f);
  expect_input_error([&] { chunked.row(n); }, {"/chunked", "row 23", "has 23"});
  expect_input_error([&] { H5Rows<float>(r, "/flat"); }, {"/flat", "2-D"});
  expect_input_error([&] { H5Rows<float>(r, "/ids"); }, {"/ids", "integer", "expected float"});
  expect_input_error([&] { H5Rows<float>(r, "/none"); }, {"/none", "no such dataset"});
}

// The row datasets evalrun writes (contiguous, stored as read) are read straight from the file a block
// ahead (io/positioned_reader): every row as written, in order, backwards, in blocks cut short at the
// end, for float, int64 and uint16; rows beyond the end of a file cut short are an error naming the
// dataset and the rows (HDF5 would read them as zeros).
TEST_F(H5Test, ContiguousRowsAreReadStraightFromTheFile) {
  const auto path = (dir_ / "direct.h5").string();
  const std::int64_t n = 37, cols = 1001;  // rows of 4004 bytes straddle the 4 KiB blocks
  std::vector<float> values(static_cast<std::size_t>(n * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n * 3));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = (std::int64_t{1} << 40) + static_cast<std::int64_t>(i);
  std::vector<std::uint16_t> levels(static_cast<std::size_t>(n * cols));
  for (std::size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<std::uint16_t>(i * 7);
  std::uint64_t at_f = 0, at_i = 0, at_u = 0;
  {
    H5Writer w(path);
    at_f = w.create_rows("/f", RowType::f32, n, cols);
    at_i = w.create_rows("/i", RowType::i64, n, 3);
    at_u = w.create_rows("/u", RowType::u16, n, cols);
    w.commit();
  }
  {
    PositionedWriter out(path);
    ASSERT_EQ(out.write(at_f, values.data(), values.size() * sizeof(float)), 0);
    ASSERT_EQ(out.write(at_i, ids.data(), ids.size() * sizeof(std::int64_t)), 0);
    ASSERT_EQ(out.write(at_u, levels.data(), levels.size() * sizeof(std::uint16_t)), 0);
  }
  H5Reader r(path);
  H5Rows<float> f(r, "/f", 5 * cols * sizeof(float));  // blocks of 5 rows: the last has 2
  ASSERT_EQ(f.block_rows(), 5);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < cols; ++j) ASSERT_EQ(f.row(i)[j], values[static_cast<std::size_t>(i * cols + j)]) << i;
  for (std::int64_t i = n - 1; i >= 0; i -= 3) ASSERT_EQ(f.row(i)[cols - 1], values[static_cast<std::size_t>(i * cols + cols - 1)]);
  H5Rows<std::int64_t> i64(r, "/i", 1);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(i64.row(i)[2], ids[static_cast<std::size_t>(i * 3 + 2)]) << i;
  H5Rows<std::uint16_t> u16(r, "/u");
  for (std::int64_t i = n - 1; i >= 0; --i) ASSERT_EQ(u16.row(i)[7], levels[static_cast<std::size_t>(i * cols + 7)]) << i;

  fs::resize_file(path, at_f + 12 * cols * sizeof(float) + 17);  // rows 12 and on are gone
  H5Reader cut(path);
  H5Rows<float> rest(cut, "/f", 4 * cols * sizeof(float));
  EXPECT_EQ(rest.row(11)[cols - 1], values[static_cast<std::size_t>(11 * cols + cols - 1)]);
  expect_input_error([&] { rest.row(12); }, {"direct.h5: /f", "rows 12..15", "the file ends before them"});
}

TEST_F(H5Test, CommitRenamesTempFile) {
  const auto path = dir_ / "out.h5";
  H5Writer w(path.string());
  EXPECT_EQ(w.final_path(), path.string());
  EXPECT_EQ(w.temp_path(), path.string() + ".tmp." + std::to_string(::getpid()));
  w.write("/x", std::vector<std::int64_t>{1, 2, 3});
  EXPECT_TRUE(fs::exists(w.temp_path()));
  EXPECT_FALSE(fs::exists(path));
  w.commit();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(w.temp_path()));
  EXPECT_THROW(w.write("/y", std::vector<std::int64_t>{1}), std::logic_error);
  EXPECT_EQ(H5Reader(path.string()).read_i64("/x"), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST_F(H5Test, UncommittedWriterLeavesPreviousFileUntouched) {
  const auto path = dir_ / "keep.h5";
  {
    H5Writer w(path.string());
    w.write("/good", std::vector<double>{1.0, 2.0});
    w.commit();
  }
  const std::string before = file_bytes(path);
  std::string temp;
  {
    H5Writer w(path.string());
    temp = w.temp_path();
    w.write("/bad", std::vector<double>(10000, 3.0));
    w.set_attr("/", "x", std::int64_t{1});
    EXPECT_TRUE(fs::exists(temp));
  }  // no commit
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(file_bytes(path), before);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST_F(H5Test, RowsLaidOutByTheWriterAreWrittenByRanksAndTheFileCompletedAfterReopening) {
  const auto path = dir_ / "rows.h5";
  const auto rows_path = dir_ / "run.rows.h5";
  RowsLayout layout;
  {
    H5Writer w(path.string(), rows_path.string());
    w.keep_on_failure();
    w.write_strings("/stale", {"left by a failed completion"});
    layout.create(w, "/big", RowType::f32, 1000, {5, 4});  // item 0: rows 0-4, item 1: rows 5-8
    layout.create(w, "/none", RowType::u16, 1000, {0});
    layout.create(w, "/ids", RowType::i64, 2, {2, 1});  // top-k ids: int64, beyond float's exact integers
    w.close();
  }  // kept: not committed, not removed
  ASSERT_TRUE(fs::exists(rows_path));
  EXPECT_FALSE(fs::exists(path));
  const RowsLayout sent = RowsLayout::from_bytes(layout.to_bytes());  // as every rank gets it
  std::vector<float> tail(4 * 1000), head(5 * 1000);
  for (std::size_t i = 0; i < tail.size(); ++i) tail[i] = static_cast<float>(i) + 0.5F;
  for (std::size_t i = 0; i < head.size(); ++i) head[i] = -static_cast<float>(i);
  {
    RankRows during;  // one rank writes its items as they finish, out of order
    during.write_as_added(sent);
    during.add("/big", 1, tail);
    during.add("/ids", 1, std::vector<std::int64_t>{(std::int64_t{1} << 40) + 1, -1});
    EXPECT_EQ(during.items(), 0u);  // nothing kept
    EXPECT_THROW(during.add("/big", 0, std::vector<float>(999)), std::logic_error);       // not 5 rows
    EXPECT_THROW(during.add("/big", 2, std::vector<float>(1000)), std::logic_error);      // no item 2
    EXPECT_THROW(during.add("/big", 0, std::vector<std::uint16_t>(5000)), std::logic_error);  // not float
    EXPECT_THROW(during.add("/other", 0, std::vector<float>(1)), std::logic_error);
    during.close();
    RankRows after;  // another keeps its rows until the file is laid out, then writes them
    after.add("/big", 0, head);
    after.add("/ids", 0, std::vector<std::int64_t>{0, 1, 2, 3});
    EXPECT_EQ(after.items(), 2u);
    after.write(sent);
    EXPECT_GT(during.write_seconds() + after.write_seconds(), 0.0);
  }
  {
    H5Writer w = H5Writer::reopen(path.string(), rows_path.string(), sent.paths());
    EXPECT_EQ(w.rows_offset("/big", RowType::f32, 9, 1000), sent.find("/big")->offset);
    expect_input_error([&] { w.rows_offset("/big", RowType::f32, 9, 999); }, {"run.rows.h5", "/big", "[9, 999]"});
    expect_input_error([&] { w.rows_offset("/big", RowType::u16, 9, 1000); }, {"/big"});
    expect_input_error([&] { w.rows_offset("/missing", RowType::u16, 1, 1); }, {"/missing", "no such dataset"});
    w.write_strings("/stale", {"written again"});  // reopening removed what was not a row dataset
    w.commit();
  }
  EXPECT_FALSE(fs::exists(rows_path));
  H5Reader r(path.string());
  EXPECT_EQ(r.shape("/big"), (std::vector<std::int64_t>{9, 1000}));
  const auto big = r.read_f32("/big");
  EXPECT_EQ(big[0], 0.0F);
  EXPECT_EQ(big[4 * 1000 + 999], -4999.0F);
  EXPECT_EQ(big[5 * 1000], 0.5F);
  EXPECT_EQ(big[9 * 1000 - 1], 3999.5F);
  EXPECT_EQ(r.shape("/none"), (std::vector<std::int64_t>{0, 1000}));
  EXPECT_EQ(r.read_i64("/ids"), (std::vector<std::int64_t>{0, 1, 2, 3, (std::int64_t{1} << 40) + 1, -1}));
  EXPECT_EQ(r.read_strings("/stale"), (std::vector<std::string>{"written again"}));
}

TEST_F(H5Test, AFailedWriterOfAReopenedFileKeepsIt) {
  const auto path = dir_ / "kept.h5";
  const auto rows_path = dir_ / "kept.rows.h5";
  {
    H5Writer w(path.string(), rows_path.string());
    w.create_rows("/r", RowType::f32, 2, 3);
    w.close();
    w.keep_on_failure();
  }
  {
    H5Writer w = H5Writer::reopen(path.string(), rows_path.string(), {"/r"});
    w.write("/x", std::vector<double>{1.0});
  }  // destroyed uncommitted (finish failed): kept for a resumed run
  ASSERT_TRUE(fs::exists(rows_path));
  EXPECT_FALSE(fs::exists(path));
  H5Reader r(rows_path.string());
  EXPECT_EQ(r.shape("/r"), (std::vector<std::int64_t>{2, 3}));
}

TEST_F(H5Test, WriterMisuseThrows) {
  H5Writer w((dir_ / "m.h5").string());
  EXPECT_THROW(w.write("/x", std::vector<float>{1, 2, 3}, {2, 2}), std::invalid_argument);
  w.write("/x", std::vector<float>{1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(w.write("/x", std::vector<float>{1}), std::runtime_error);       // exists
  EXPECT_THROW(w.set_attr("/nope", "a", 1.0), std::runtime_error);             // no object
  EXPECT_THROW(w.create_group("/x"), std::runtime_error);                      // a dataset
}

TEST_F(H5Test, ReaderErrorsNameFileAndObject) {
  expect_input_error([&] { H5Reader r((dir_ / "missing.h5").string()); }, {"missing.h5"});
  const auto junk = dir_ / "junk.h5";
  std::ofstream(junk) << "this is not an HDF5 file";
  expect_input_error([&] { H5Reader r(junk.string()); }, {"junk.h5"});

  const auto path = (dir_ / "r.h5").string();
  {
    H5Writer w(path);
    w.write_strings("/s", {"a"});
    w.write("/v", std::vector<std::int64_t>{1});
    w.write("/bad_ragged/values", std::vector<std::int64_t>{1, 2});
    w.write("/bad_ragged/offsets", std::vector<std::uint64_t>{0, 3});
    w.set_attr("/", "str", std::string("x"));
    w.commit();
  }
  H5Reader r(path);
  expect_input_error([&] { r.read_f32("/no/such"); }, {"r.h5", "/no/such"});
  expect_input_error([&] { r.shape("/missing"); }, {"r.h5", "/missing"});
  expect_input_error([&] { r.read_f32("/s"); }, {"r.h5", "/s", "string"});
  expect_input_error([&] { r.read_strings("/v"); }, {"r.h5", "/v"});
  expect_input_error([&] { r.read_f64("/v"); }, {"r.h5", "/v", "integer"});
  expect_input_error([&] { r.children("/v"); }, {"r.h5", "/v"});
  expect_input_error([&] { r.attr_int("/", "nope"); }, {"r.h5", "nope"});
  expect_input_error([&] { r.attr_int("/", "str"); }, {"r.h5", "str"});
  expect_input_error([&] { r.attr_string("/gone", "a"); }, {"r.h5", "/gone"});
  expect_input_error([&] { r.has_attr("/gone", "a"); }, {"r.h5", "/gone"});
  expect_input_error([&] { r.read_ragged_i64("/bad_ragged"); }, {"r.h5", "/bad_ragged", "offset"});
  expect_input_error([&] { r.read_ragged_i64("/v"); }, {"r.h5", "/v", "not a group"});
}

TEST_F(H5Test, ReadsFixedLengthStrings) {
  // Written with the C API directly: the writer only makes variable-length strings.
  const auto path = (dir_ / "fixed.h5").string();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, 5);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  hsize_t n = 3;
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, "/fixed", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const char buf[15] = {'a', 'b', 0, 0, 0, 'h', 'e', 'l', 'l', 'o', 'x', 0, 0, 0, 0};
  H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, "fa", t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, "hi\0\0\0");
  H5Aclose(a);
  H5Sclose(s);
  H5Dclose(d);
  H5Sclose(sp);
  H5Tclose(t);
  H5Fclose(f);
  H5Reader r(path);
  EXPECT_EQ(r.read_strings("/fixed"), (std::vector<std::string>{"ab", "hello", "x"}));
  EXPECT_EQ(r.attr_string("/", "fa"), "hi");
}

TEST_F(H5Test, H5dumpReadsWrittenFile) {
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed";
  const auto path = (dir_ / "dump.h5").string();
  {
    H5Writer w(path);
    w.write_f16("/logits", std::vector<std::uint16_t>(6000, 0x3800), {60, 100});
    w.write_strings("/samples/id", {"q1", "q2"});
    w.set_attr("/", "task", std::string("qa"));
    w.commit();
  }
  FILE* p = ::popen(("h5dump -H " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("DATASET \"logits\""), std::string::npos) << out;
  EXPECT_NE(out.find("16-bit little-endian floating-point"), std::string::npos) << out;
  EXPECT_NE(out.find("H5T_CSET_UTF8"), std::string::npos) << out;
  EXPECT_NE(out.find("ATTRIBUTE \"task\""), std::string::npos) << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
}

// ---- the shared oracle reference ----------------------------------------------------------------------

TEST(H5Oracle, RobertaMlmReference) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  H5Reader r(data + "/oracle/roberta-mlm/reference.h5");
  const auto ids = r.read_strings("/ids");
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids.front(), "mlm-a");
  EXPECT_EQ(r.read_i64("/samples/mlm-a/input_ids"),
            (std::vector<std::int64_t>{0, 32826, 16, 5, 50264, 9, 1470, 4, 2}));
  EXPECT_EQ(r.attr_string("/samples/mlm-a", "text"), "Paris is the <mask> of France.");
  EXPECT_EQ(r.attr_int("/", "topk"), 5);
  EXPECT_EQ(r.shape("/samples/mlm-a/mask_logits"), (std::vector<std::int64_t>{1, 50265}));
  EXPECT_EQ(r.read_i64("/samples/mlm-a/topk_ids"), (std::vector<std::int64_t>{13525, 2780, 14085, 37298, 39190}));
  const auto top = r.read_f32("/samples/mlm-a/topk_logits");
  ASSERT_EQ(top.size(), 5u);
  EXPECT_NEAR(top[0], 8.5289, 1e-4);
  EXPECT_EQ(r.read_f32("/samples/mlm-a/mask_logits").size(), 50265u);
  EXPECT_EQ(r.children("/samples").size(), 6u);
  EXPECT_EQ(r.attr_string("/samples/mlm-e", "text"),
            "The Rhine flows through Basel, Köln and Düsseldorf before it reaches the North <mask>.");
  expect_input_error([&] { r.read_f32("/samples/mlm-z/mask_logits"); }, {"reference.h5", "/samples/mlm-z/mask_logits"});
}

TEST(H5Oracle, RobertaQaReference) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  H5Reader r(data + "/oracle/roberta-qa/reference.h5");
  const auto ids = r.read_strings("/example_ids");
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids[0], "5726c3da708984140094d0db");
  EXPECT_EQ(r.read_strings("/features/example_id").size(), 13u);
  const auto in = r.read_i64("/features/00/input_ids");
  ASSERT_GE(in.size(), 8u);
  EXPECT_EQ(std::vector<std::int64_t>(in.begin(), in.begin() + 8),
            (std::vector<std::int64_t>{0, 2264, 222, 5, 837, 9, 1659, 1219}));
  EXPECT_NEAR(r.read_f32("/features/00/start_logits")[0], 0.836203, 1e-6);
  EXPECT_NEAR(r.attr_double("/metrics", "f1"), 5.5060, 1e-4);
}
