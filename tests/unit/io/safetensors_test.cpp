#include "io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "test_util.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 31 + seed * 7 + 3) & 0xff);
  return b;
}

// Writes a file as: 8-byte little-endian length, header text verbatim, then `data`.
void write_raw(const fs::path& p, const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = 0) {
  std::ofstream out(p, std::ios::binary);
  const std::uint64_t n = claimed_len != 0 ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
}

// Runs f, expecting an InputError whose message contains every one of `parts`.
void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = evalrun::testing::make_temp_dir("io-safetensors"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST(TensorDType, NamesAndSizes) {
  EXPECT_STREQ(to_string(TensorDType::BF16), "BF16");
  EXPECT_STREQ(to_string(TensorDType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(element_size(TensorDType::F64), 8u);
  EXPECT_EQ(element_size(TensorDType::F16), 2u);
  EXPECT_EQ(element_size(TensorDType::BOOL), 1u);
  EXPECT_EQ(element_size(TensorDType::I32), 4u);
}

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  const std::vector<TensorDType> all = {TensorDType::F64,  TensorDType::F32, TensorDType::F16,    TensorDType::BF16,
                                        TensorDType::I64,  TensorDType::I32, TensorDType::I16,    TensorDType::I8,
                                        TensorDType::U8,   TensorDType::BOOL, TensorDType::F8_E4M3, TensorDType::F8_E5M2};
  std::vector<TensorToWrite> ts;
  unsigned seed = 0;
  for (auto dt : all) {
    std::vector<std::int64_t> shape = {2, static_cast<std::int64_t>(seed % 3 + 1), 3};
    const std::size_t n = 2 * (seed % 3 + 1) * 3 * element_size(dt);
    // reverse-alphabetical names so the writer's sorting matters
    ts.push_back({std::string("t.") + static_cast<char>('z' - seed) + "." + to_string(dt), dt, shape, bytes_of(n, seed)});
    ++seed;
  }
  ts.push_back({"scalar", TensorDType::F32, {}, bytes_of(4, 99)});
  ts.push_back({"empty", TensorDType::F32, {0, 5}, {}});
  const auto path = (dir_ / "m.safetensors").string();
  write_safetensors(path, ts, {{"format", "pt"}, {"note", "ünïcode"}});

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "ünïcode");
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (const auto& t : ts) {
    const TensorView* v = f.find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(v->dtype, t.dtype) << t.name;
    EXPECT_EQ(v->shape, t.shape) << t.name;
    EXPECT_EQ(v->file, path);
    ASSERT_EQ(v->nbytes, t.data.size()) << t.name;
    if (!t.data.empty()) {
      EXPECT_EQ(std::memcmp(v->data, t.data.data(), t.data.size()), 0) << t.name;
    }
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST_F(SafetensorsTest, HeaderIsPaddedAndDataInNameOrder) {
  const auto path = (dir_ / "m.safetensors").string();
  write_safetensors(path, {{"b", TensorDType::U8, {3}, bytes_of(3, 1)}, {"a", TensorDType::U8, {5}, bytes_of(5, 2)}});
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(all.size(), 8 + n + 8);
  const std::string header = all.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // padding is trailing spaces
  EXPECT_LT(header.find("\"a\""), header.find("\"b\""));
  EXPECT_NE(header.find("\"__metadata__\":{\"format\":\"pt\"}"), std::string::npos) << header;
  SafetensorsFile f(path);
  EXPECT_EQ(f.find("a")->data + 5, f.find("b")->data);  // a's bytes come right before b's
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  const auto path = (dir_ / "w.safetensors").string();
  expect_input_error([&] { write_safetensors(path, {{"x", TensorDType::F32, {2}, bytes_of(4, 0)}}); },
                     {"w.safetensors", "'x'"});
  expect_input_error(
      [&] {
        write_safetensors(path, {{"x", TensorDType::U8, {1}, bytes_of(1, 0)}, {"x", TensorDType::U8, {1}, bytes_of(1, 0)}});
      },
      {"w.safetensors", "'x'"});
  expect_input_error([&] { write_safetensors(path, {{"n", TensorDType::U8, {-1}, {}}}); }, {"'n'", "negative"});
}

// ---- malformed files: every case must name the file and, where there is one, the tensor ----------

struct BadCase {
  const char* label;
  std::string header;
  std::size_t data_bytes;
  std::vector<std::string> expect;  // substrings besides the file name
};

TEST_F(SafetensorsTest, MalformedHeadersAreInputErrors) {
  const std::vector<BadCase> cases = {
      {"bad_json", "{\"a\": {\"dtype\": \"F32\",", 0, {"JSON"}},
      {"not_object", "[1, 2, 3]", 0, {"not an object"}},
      {"entry_not_object", R"({"w1": 5})", 0, {"'w1'", "not an object"}},
      {"unknown_dtype", R"({"w2": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}})", 16, {"'w2'", "F128"}},
      {"negative_dim", R"({"w3": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}})", 8, {"'w3'", "negative"}},
      {"offsets_one", R"({"w4": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, {"'w4'", "data_offsets"}},
      {"offsets_neg", R"({"w5": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4, {"'w5'", "data_offsets"}},
      {"offsets_missing", R"({"w6": {"dtype": "F32", "shape": [1]}})", 4, {"'w6'", "data_offsets"}},
      {"end_past_buffer", R"({"w7": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12, {"'w7'", "past"}},
      {"begin_gt_end", R"({"w8": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8, {"'w8'", "begin"}},
      {"size_mismatch", R"({"w9": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, {"'w9'", "needs 12"}},
      {"overlap",
       R"({"wa": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "wb": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12,
       {"'wb'", "overlaps", "'wa'"}},
      {"duplicate", R"({"wc": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "wc": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
       2,
       {"'wc'", "twice"}},
      {"shape_not_int", R"({"wd": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, {"'wd'"}},
      {"metadata_not_string", R"({"__metadata__": {"k": 1}})", 0, {"__metadata__", "'k'"}},
      // 0 bytes, but 2^62 * 3 elements do not fit int64 (TensorView::numel overflowed).
      {"numel_overflow", R"({"we": {"dtype": "U8", "shape": [4611686018427387904, 3, 0], "data_offsets": [0, 0]}})", 0,
       {"'we'", "too large"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const auto path = dir_ / (std::string(c.label) + ".safetensors");
    write_raw(path, c.header, c.data_bytes);
    auto parts = c.expect;
    parts.push_back(path.filename().string());
    expect_input_error([&] { SafetensorsFile f(path.string()); }, parts);
  }
}

TEST_F(SafetensorsTest, TruncatedFilesAreInputErrors) {
  const auto shorty = dir_ / "short.safetensors";
  std::ofstream(shorty, std::ios::binary) << "abcde";
  expect_input_error([&] { SafetensorsFile f(shorty.string()); }, {"short.safetensors", "shorter than"});

  const auto longhdr = dir_ / "longhdr.safetensors";
  write_raw(longhdr, "{}", 0, 1000);
  expect_input_error([&] { SafetensorsFile f(longhdr.string()); }, {"longhdr.safetensors", "header length 1000"});

  expect_input_error([&] { SafetensorsFile f((dir_ / "missing.safetensors").string()); }, {"missing.safetensors"});
}

TEST_F(SafetensorsTest, AcceptsEmptyHeaderAndZeroSizeTensorsAtSameOffset) {
  const auto path = dir_ / "ok.safetensors";
  write_raw(path,
            R"({"e1": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}, "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
            8);
  SafetensorsFile f(path.string());
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_TRUE(f.metadata().empty());
}

// ---- checkpoints ------------------------------------------------------------------------------------

namespace {

void write_index(const fs::path& dir, const std::string& weight_map_json) {
  std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {"total_size": 0}, "weight_map": )"
                                                      << weight_map_json << "}";
}

}  // namespace

TEST_F(SafetensorsTest, SingleFileCheckpoint) {
  write_safetensors((dir_ / "model.safetensors").string(),
                    {{"b", TensorDType::F32, {2}, bytes_of(8, 1)}, {"a", TensorDType::I64, {1}, bytes_of(8, 2)}});
  Checkpoint ck(dir_.string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.files(), (std::vector<std::string>{(dir_ / "model.safetensors").string()}));
  EXPECT_EQ(ck.get("a").dtype, TensorDType::I64);
  EXPECT_EQ(ck.find("zzz"), nullptr);
  expect_input_error([&] { ck.get("zzz"); }, {"'zzz'", dir_.string()});
}

TEST_F(SafetensorsTest, ShardedRoundTrip) {
  write_safetensors((dir_ / "s-1.safetensors").string(),
                    {{"emb", TensorDType::F32, {3, 2}, bytes_of(24, 1)}});
  write_safetensors((dir_ / "s-2.safetensors").string(),
                    {{"l.w", TensorDType::F16, {2, 2}, bytes_of(8, 2)}, {"l.b", TensorDType::F16, {2}, bytes_of(4, 3)}});
  write_index(dir_, R"({"emb": "s-1.safetensors", "l.w": "s-2.safetensors", "l.b": "s-2.safetensors"})");
  Checkpoint ck(dir_.string());
  EXPECT_EQ(ck.dir(), dir_.string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"emb", "l.b", "l.w"}));
  EXPECT_EQ(ck.files(), (std::vector<std::string>{(dir_ / "s-1.safetensors").string(), (dir_ / "s-2.safetensors").string()}));
  EXPECT_EQ(ck.get("emb").file, (dir_ / "s-1.safetensors").string());
  EXPECT_EQ(ck.get("l.w").file, (dir_ / "s-2.safetensors").string());
  const auto expected = bytes_of(8, 2);
  EXPECT_EQ(std::memcmp(ck.get("l.w").data, expected.data(), 8), 0);
  EXPECT_EQ(ck.get("emb").shape, (std::vector<std::int64_t>{3, 2}));
}

TEST_F(SafetensorsTest, IndexPreferredOverSingleFileAndErrors) {
  write_safetensors((dir_ / "s-1.safetensors").string(), {{"a", TensorDType::U8, {1}, bytes_of(1, 1)}});
  write_safetensors((dir_ / "s-2.safetensors").string(),
                    {{"b", TensorDType::U8, {1}, bytes_of(1, 2)}, {"a", TensorDType::U8, {1}, bytes_of(1, 3)}});

  write_index(dir_, R"({"a": "s-1.safetensors", "b": "s-9.safetensors"})");
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {"model.safetensors.index.json", "s-9.safetensors"});

  write_index(dir_, R"({"a": "s-1.safetensors", "c": "s-1.safetensors"})");
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {"'c'", "s-1.safetensors"});

  // "a" is in both shards
  write_index(dir_, R"({"a": "s-1.safetensors", "b": "s-2.safetensors"})");
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {"'a'", "duplicate", "s-1.safetensors", "s-2.safetensors"});

  write_index(dir_, R"([1])");
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {"model.safetensors.index.json", "weight_map"});
}

TEST_F(SafetensorsTest, DirectoryWithoutCheckpointIsInputError) {
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {dir_.string(), "model.safetensors"});
  expect_input_error([&] { Checkpoint ck((dir_ / "nope").string()); }, {(dir_ / "nope").string()});
}

TEST_F(SafetensorsTest, MalformedShardNamesFileAndTensor) {
  write_raw(dir_ / "model.safetensors", R"({"bad": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", 1);
  expect_input_error([&] { Checkpoint ck(dir_.string()); }, {"model.safetensors", "'bad'", "Q4"});
}

// ---- shared oracle checkpoints ------------------------------------------------------------------------

TEST(SafetensorsOracle, RobertaQaSharded) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  Checkpoint ck(data + "/oracle/roberta-qa");
  EXPECT_EQ(ck.names().size(), 39u);
  ASSERT_EQ(ck.files().size(), 2u);
  const auto& emb = ck.get("roberta.embeddings.word_embeddings.weight");
  EXPECT_EQ(emb.dtype, TensorDType::F32);
  EXPECT_EQ(emb.shape, (std::vector<std::int64_t>{50265, 48}));
  EXPECT_EQ(emb.nbytes, 50265u * 48u * 4u);
  EXPECT_EQ(fs::path(emb.file).filename(), "model-00001-of-00002.safetensors");
  const auto& qa = ck.get("qa_outputs.weight");
  EXPECT_EQ(qa.shape, (std::vector<std::int64_t>{2, 48}));
  EXPECT_EQ(fs::path(qa.file).filename(), "model-00002-of-00002.safetensors");
  for (const auto& n : ck.names()) EXPECT_EQ(ck.get(n).dtype, TensorDType::F32) << n;
  SafetensorsFile shard1(ck.files()[0]);
  EXPECT_EQ(shard1.metadata().at("format"), "pt");
}

TEST(SafetensorsOracle, RobertaMlmSingleFile) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  Checkpoint ck(data + "/oracle/roberta-mlm");
  EXPECT_EQ(ck.names().size(), 42u);
  EXPECT_EQ(ck.find("lm_head.decoder.weight"), nullptr);
  EXPECT_EQ(ck.get("lm_head.bias").shape, (std::vector<std::int64_t>{50265}));
  EXPECT_EQ(ck.get("roberta.embeddings.word_embeddings.weight").shape, (std::vector<std::int64_t>{50265, 48}));
}
