// pytorch_model.bin (torch.save's zip format) read as tensors only. Two producers that are not ours:
// libtorch's torch::pickle_save (the C++ twin of torch.save) writes archives we read back, and
// libtorch's own PyTorchStreamWriter (the zip writer under Python's torch.save) carries the pickles
// written here byte by byte as Python's pickler writes a state dict (libtorch's torch::pickle_load
// reads the plain-dict form too, so the hand-written stream is checked by an independent reader). Then what
// must be refused (globals that would run code, compressed entries, tensors that do not fit, ...), the
// checkpoint layouts, and a model loaded from pytorch_model.bin equal to the same model from safetensors.
#include "io/torch_bin.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "fixtures/make_model.hpp"
#include "io/safetensors.hpp"
#include "model/llama.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

namespace fs = std::filesystem;

// Python's pickler (protocol 2) for the objects of a state dict, one opcode at a time.
struct Pickle {
  std::string b = "\x80\x02";
  Pickle& op(char c) { b += c; return *this; }
  Pickle& str(const std::string& s) {
    b += 'X';
    for (int i = 0; i < 4; ++i) b += static_cast<char>((s.size() >> (8 * i)) & 0xff);
    b += s;
    return *this;
  }
  Pickle& integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      b += 'K';
      b += static_cast<char>(v);
    } else {
      b += 'J';
      for (int i = 0; i < 4; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff);
    }
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    b += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  Pickle& ints(const std::vector<std::int64_t>& v) {
    op('(');
    for (auto x : v) integer(x);
    return op('t');
  }
  Pickle& ordered_dict() { return global("collections", "OrderedDict").op(')').op('R'); }
  // torch._utils._rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), offset, size, stride,
  // False, OrderedDict())
  Pickle& tensor(const std::string& storage_type, const std::string& key, std::int64_t numel, std::int64_t offset,
                 const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", storage_type).str(key).str("cpu").integer(numel).op('t').op('Q');
    integer(offset).ints(size).ints(stride).op('\x89').ordered_dict();
    return op('t').op('R');
  }
  Pickle& stop() { return op('.'); }
};

// A state dict {name: tensor} as torch.save writes it: model.state_dict() is an OrderedDict with its
// _metadata set through BUILD; a plain dict (torch.save({...})) is EMPTY_DICT and SETITEMS.
struct Entry {
  std::string name, storage_type, key;
  std::int64_t numel, offset;
  std::vector<std::int64_t> size, stride;
};
std::string state_dict_pickle(const std::vector<Entry>& entries, bool ordered = true) {
  Pickle p;
  if (ordered) {
    p.ordered_dict();
  } else {
    p.op('}');
  }
  p.op('(');
  for (const auto& e : entries) p.str(e.name).tensor(e.storage_type, e.key, e.numel, e.offset, e.size, e.stride);
  p.op('u');
  if (ordered) {
    p.op('}').str("_metadata").ordered_dict().op('(').str("").op('}').str("version").integer(1).op('s').op('u').op('s');
    p.op('b');
  }
  return p.stop().b;
}

struct Record {
  std::string name;
  std::string bytes;
  bool compress = false;
};
// A zip written by libtorch's PyTorchStreamWriter, as torch.save writes one: <stem>/data.pkl and
// <stem>/data/<key> (the writer adds <stem>/version).
void write_archive(const fs::path& path, const std::vector<Record>& records) {
  caffe2::serialize::PyTorchStreamWriter w(path.string());
  for (const auto& r : records) w.writeRecord(r.name, r.bytes.data(), r.bytes.size(), r.compress);
  w.writeEndOfFile();
}

std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> floats_of(const TensorView& v) {
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  EXPECT_EQ(v.nbytes, out.size() * sizeof(float));
  std::memcpy(out.data(), v.data, out.size() * sizeof(float));
  return out;
}

void write_file(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The InputError message (where: what), or "" when none was thrown.
std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

class TorchBin : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("evalrun-torch-bin"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// libtorch's pickle_save writes the archive; every dtype, a view at an offset into a shared storage,
// a scalar and an empty tensor come back with their bytes.
TEST_F(TorchBin, ReadsWhatLibtorchPickleSaveWrites) {
  torch::manual_seed(3);
  const at::Tensor base = torch::randn({4, 3});
  c10::Dict<std::string, at::Tensor> d;
  d.insert("weight", base);
  d.insert("rows", base.narrow(0, 1, 2));  // storage offset 3, the same storage as "weight"
  d.insert("half", torch::randn({5}).to(torch::kHalf));
  d.insert("bf16", torch::randn({2, 3}).to(torch::kBFloat16));
  d.insert("ids", torch::arange(7, torch::kLong));
  d.insert("mask", torch::tensor({true, false, true}));
  d.insert("scalar", torch::tensor(2.5f));
  d.insert("empty", torch::zeros({0, 3}));
  const std::vector<char> zip = torch::pickle_save(c10::IValue(d));
  const fs::path path = dir_ / "pytorch_model.bin";
  write_file(path, std::string(zip.begin(), zip.end()));

  TorchBinFile f(path.string());
  ASSERT_EQ(f.tensors().size(), 8u);
  for (const auto& key : {"weight", "rows", "half", "bf16", "ids", "mask", "scalar", "empty"}) {
    const at::Tensor want = d.at(key).contiguous();
    const TensorView* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->shape, std::vector<std::int64_t>(want.sizes().begin(), want.sizes().end())) << key;
    ASSERT_EQ(v->nbytes, static_cast<std::size_t>(want.numel() * want.element_size())) << key;
    // (an empty tensor's data pointer may be null, which memcmp must not get even for 0 bytes)
    if (v->nbytes > 0) {
      EXPECT_EQ(std::memcmp(v->data, want.data_ptr(), v->nbytes), 0) << key;
    }
  }
  EXPECT_EQ(f.find("half")->dtype, TensorDType::F16);
  EXPECT_EQ(f.find("bf16")->dtype, TensorDType::BF16);
  EXPECT_EQ(f.find("ids")->dtype, TensorDType::I64);
  EXPECT_EQ(f.find("mask")->dtype, TensorDType::BOOL);
  EXPECT_EQ(f.find("rows")->data, f.find("weight")->data + 3 * sizeof(float));

  // A transposed view is saved with its strides: not contiguous, refused naming it.
  c10::Dict<std::string, at::Tensor> t;
  t.insert("wt", torch::randn({3, 2}).t());
  const std::vector<char> zt = torch::pickle_save(c10::IValue(t));
  write_file(dir_ / "t.bin", std::string(zt.begin(), zt.end()));
  const std::string e = input_error([&] { TorchBinFile x((dir_ / "t.bin").string()); });
  EXPECT_NE(e.find("tensor 'wt'"), std::string::npos) << e;
  EXPECT_NE(e.find("not contiguous"), std::string::npos) << e;
}

// The stream Python writes for a state dict (_rebuild_tensor_v2 with backward hooks, a tied weight, a
// storage offset). libtorch's reader maps every OrderedDict to None (it expects them only as a
// tensor's hooks), so the plain-dict form is checked by it first; the OrderedDict form with
// _metadata, as save_pretrained writes it, must give us the same tensors.
TEST_F(TorchBin, ReadsPythonsStateDictPickle) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<Entry> entries = {
      {"embed.weight", "FloatStorage", "0", 8, 0, {2, 4}, {4, 1}},
      {"lm_head.weight", "FloatStorage", "0", 8, 0, {2, 4}, {4, 1}},  // tied: the same storage
      {"norm.weight", "FloatStorage", "1", 6, 2, {4}, {1}},           // offset 2 into storage 1
  };
  const std::vector<Record> storages = {{"byteorder", "little"},
                                        {"data/0", float_bytes(w)},
                                        {"data/1", float_bytes({9, 9, 10, 11, 12, 13})}};
  auto archive = [&](const std::string& name, bool ordered) {
    std::vector<Record> records = storages;
    records.push_back({"data.pkl", state_dict_pickle(entries, ordered)});
    write_archive(dir_ / name, records);
    return dir_ / name;
  };
  const fs::path plain = archive("plain.bin", false), ordered = archive("pytorch_model.bin", true);

  const std::string bytes = read_bytes(plain);
  const auto dict = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  ASSERT_EQ(dict.size(), 3u);
  EXPECT_TRUE(torch::equal(dict.at("norm.weight").toTensor(), torch::tensor({10.f, 11.f, 12.f, 13.f})));

  for (const fs::path& path : {plain, ordered}) {
    TorchBinFile f(path.string());
    ASSERT_EQ(f.tensors().size(), 3u) << path;
    EXPECT_EQ(f.find("embed.weight")->shape, (std::vector<std::int64_t>{2, 4}));
    EXPECT_EQ(floats_of(*f.find("embed.weight")), w);
    EXPECT_EQ(f.find("lm_head.weight")->data, f.find("embed.weight")->data);
    EXPECT_EQ(floats_of(*f.find("norm.weight")), (std::vector<float>{10, 11, 12, 13}));
    for (const auto& [name, v] : f.tensors()) {
      const at::Tensor ref = dict.at(name).toTensor();
      EXPECT_EQ(std::memcmp(v.data, ref.data_ptr(), v.nbytes), 0) << name;
    }
  }
}

// Files written by CPython's own pickler (protocol 2 with its memo, protocol 4 with frames) through
// stand-ins that carry the names torch.save writes, in a zip from Python's zipfile: the fuzz seeds
// fuzz/corpus/torch_bin/*.bin. float32 0..5 in storage 0, fp16 1.0 x 4 in storage 1.
TEST_F(TorchBin, ReadsCPythonPicklerOutput) {
  const std::string seeds = EVALRUN_TORCH_BIN_SEEDS;
  TorchBinFile o(seeds + "/ordered_proto2.bin");
  ASSERT_EQ(o.tensors().size(), 3u);
  EXPECT_EQ(floats_of(*o.find("a.weight")), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(o.find("a.weight")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(o.find("tied")->data, o.find("a.weight")->data);
  const TensorView& bias = *o.find("b.bias");
  EXPECT_EQ(bias.dtype, TensorDType::F16);
  EXPECT_EQ(bias.shape, std::vector<std::int64_t>{3});
  EXPECT_EQ(bias.nbytes, 6u);
  EXPECT_EQ(std::memcmp(bias.data, "\x00\x3c\x00\x3c\x00\x3c", 6), 0);
  TorchBinFile p(seeds + "/plain_proto4.bin");
  ASSERT_EQ(p.tensors().size(), 1u);
  EXPECT_EQ(floats_of(*p.find("x")), (std::vector<float>{2, 3, 4, 5}));
}

// What must never be read: each is one InputError naming the file and what is wrong.
TEST_F(TorchBin, RefusesWhatIsNotATensorStateDict) {
  const std::string ok_data = float_bytes({1, 2, 3, 4});
  const std::vector<Entry> one = {{"w", "FloatStorage", "0", 4, 0, {4}, {1}}};
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> write;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"code via a global",
       [&](const fs::path& p) {
         Pickle k;
         k.global("posix", "system").op('(').str("touch /tmp/evalrun-pwned").op('t').op('R').stop();
         write_archive(p, {{"data.pkl", k.b}});
       },
       {"data.pkl byte", "pickle global 'posix.system' is not allowed"}},
      {"code via STACK_GLOBAL",
       [&](const fs::path& p) {
         Pickle k;
         k.str("builtins").str("eval").op('\x93').op('(').str("1").op('t').op('R').stop();
         write_archive(p, {{"data.pkl", k.b}});
       },
       {"pickle global 'builtins.eval' is not allowed"}},
      {"an object built by INST",
       [&](const fs::path& p) { write_archive(p, {{"data.pkl", "\x80\x02(ios\nsystem\n."}}); },
       {"opcode 0x69 is not one a state dict uses"}},
      {"compressed storage",
       [&](const fs::path& p) {
         write_archive(p, {{"data.pkl", state_dict_pickle(one)}, {"data/0", std::string(4096, 'a'), true}});
       },
       {"data/0", "compressed entry"}},
      {"missing storage",
       [&](const fs::path& p) { write_archive(p, {{"data.pkl", state_dict_pickle(one)}}); },
       {"tensor 'w'", "storage", "data/0' is not in the archive"}},
      {"storage too small",
       [&](const fs::path& p) {
         write_archive(p, {{"data.pkl", state_dict_pickle({{"w", "FloatStorage", "0", 8, 0, {8}, {1}}})},
                           {"data/0", ok_data}});
       },
       {"tensor 'w'", "holds 16 bytes", "needs 32"}},
      {"past its storage",
       [&](const fs::path& p) {
         write_archive(p, {{"data.pkl", state_dict_pickle({{"w", "FloatStorage", "0", 4, 2, {4}, {1}}})},
                           {"data/0", ok_data}});
       },
       {"tensor 'w'", "at offset 2 does not fit its storage of 4 elements"}},
      {"a list, not a dict",
       [&](const fs::path& p) { write_archive(p, {{"data.pkl", std::string("\x80\x02]q\x00.", 6)}}); },
       {"the pickle holds a list, not a state dict"}},
      {"a nested dict",
       [&](const fs::path& p) {
         Pickle k;
         k.op('}').str("state_dict").op('}').op('s').stop();
         write_archive(p, {{"data.pkl", k.b}});
       },
       {"tensor 'state_dict'", "is a dict, not a tensor"}},
      {"big-endian",
       [&](const fs::path& p) {
         write_archive(p, {{"data.pkl", state_dict_pickle(one)}, {"byteorder", "big"}, {"data/0", ok_data}});
       },
       {"byteorder", "'big': only little-endian"}},
      {"no STOP",
       [&](const fs::path& p) {
         std::string k = state_dict_pickle(one);
         k.pop_back();
         write_archive(p, {{"data.pkl", k}, {"data/0", ok_data}});
       },
       {"ends without STOP"}},
      {"truncated zip",
       [&](const fs::path& p) {
         write_archive(p, {{"data.pkl", state_dict_pickle(one)}, {"data/0", ok_data}});
         const std::string all = read_bytes(p);
         write_file(p, all.substr(0, all.size() / 2));
       },
       {"not a zip archive"}},
      {"legacy format",
       [&](const fs::path& p) { write_file(p, std::string("\x80\x02\x8a\x0al\xfc\x9c" "F\xf9 j\xa8P\x19.") + std::string(32, '\0')); },
       {"legacy torch.save format"}},
      {"a zip without data.pkl",
       [&](const fs::path& p) { write_archive(p, {{"weights", ok_data}}); },
       {"without an <archive>/data.pkl entry"}},
  };
  for (const auto& c : cases) {
    const fs::path p = dir_ / "pytorch_model.bin";
    fs::remove(p);
    c.write(p);
    const std::string e = input_error([&] { TorchBinFile f(p.string()); });
    ASSERT_FALSE(e.empty()) << c.name << ": no InputError";
    EXPECT_NE(e.find(p.string()), std::string::npos) << c.name << ": " << e;
    for (const auto& part : c.parts) EXPECT_NE(e.find(part), std::string::npos) << c.name << ": " << e;
  }
  EXPECT_FALSE(fs::exists("/tmp/evalrun-pwned"));
}

// Checkpoint directories: pytorch_model.bin, sharded with pytorch_model.bin.index.json, and
// safetensors first when both are there (as from_pretrained prefers them).
TEST_F(TorchBin, CheckpointLayouts) {
  auto bin = [&](const fs::path& p, const std::string& name, const std::vector<float>& v) {
    c10::Dict<std::string, at::Tensor> d;
    d.insert(name, torch::tensor(v));
    const std::vector<char> z = torch::pickle_save(c10::IValue(d));
    write_file(p, std::string(z.begin(), z.end()));
  };
  bin(dir_ / "pytorch_model.bin", "a", {1, 2});
  {
    Checkpoint ck(dir_.string());
    EXPECT_EQ(ck.names(), std::vector<std::string>{"a"});
    EXPECT_EQ(floats_of(ck.get("a")), (std::vector<float>{1, 2}));
  }
  bin(dir_ / "pytorch_model-00001-of-00002.bin", "a", {3});
  bin(dir_ / "pytorch_model-00002-of-00002.bin", "b", {4, 5});
  std::ofstream(dir_ / "pytorch_model.bin.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "pytorch_model-00001-of-00002.bin", "b": "pytorch_model-00002-of-00002.bin"}})";
  {
    Checkpoint ck(dir_.string());
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(floats_of(ck.get("a")), std::vector<float>{3});
    EXPECT_EQ(floats_of(ck.get("b")), (std::vector<float>{4, 5}));
    EXPECT_EQ(ck.files().size(), 2u);
    // What the run's fingerprint hashes: the shards and their index, not the unsharded .bin beside them.
    EXPECT_EQ(ck.input_files(), (std::vector<std::string>{(dir_ / "pytorch_model-00001-of-00002.bin").string(),
                                                          (dir_ / "pytorch_model-00002-of-00002.bin").string(),
                                                          (dir_ / "pytorch_model.bin.index.json").string()}));
  }
  write_safetensors((dir_ / "model.safetensors").string(),
                    {TensorToWrite{"s", TensorDType::F32, {1}, std::vector<std::byte>(4, std::byte{0})}});
  EXPECT_EQ(Checkpoint(dir_.string()).names(), std::vector<std::string>{"s"});
  EXPECT_EQ(Checkpoint(dir_.string()).input_files(), std::vector<std::string>{(dir_ / "model.safetensors").string()});
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  EXPECT_NE(input_error([&] { Checkpoint c(empty.string()); }).find("pytorch_model.bin"), std::string::npos);
}

// A model from pytorch_model.bin computes what the same weights from model.safetensors do.
TEST_F(TorchBin, ModelFromPytorchModelBinEqualsSafetensors) {
  const fs::path st = dir_ / "st", pt = dir_ / "pt";
  make_llama_checkpoint(st.string(), "tiny-llama", 5, 64);
  fs::create_directories(pt);
  fs::copy_file(st / "config.json", pt / "config.json");
  c10::Dict<std::string, at::Tensor> d;
  {
    SafetensorsFile f((st / "model.safetensors").string());
    for (const auto& [name, v] : f.tensors()) {
      ASSERT_EQ(v.dtype, TensorDType::F32);
      d.insert(name, torch::from_blob(const_cast<std::byte*>(v.data), v.shape, torch::kFloat32).clone());
    }
  }
  const std::vector<char> z = torch::pickle_save(c10::IValue(d));
  write_file(pt / "pytorch_model.bin", std::string(z.begin(), z.end()));

  const std::vector<std::int64_t> ids = {1, 7, 30, 12, 55, 9, 41};
  auto a = LlamaModel::load(ModelLoad{st.string()});
  auto b = LlamaModel::load(ModelLoad{pt.string()});
  const auto ha = a->hidden_states(ids.data(), 1, static_cast<std::int64_t>(ids.size()));
  const auto hb = b->hidden_states(ids.data(), 1, static_cast<std::int64_t>(ids.size()));
  ASSERT_EQ(ha.size(), hb.size());
  for (std::size_t l = 0; l < ha.size(); ++l) EXPECT_EQ(ha[l], hb[l]) << "layer " << l;
}

}  // namespace
}  // namespace evalrun
