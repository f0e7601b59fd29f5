#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"
#include "io/torch_bin.hpp"

namespace evalrun {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct DTypeInfo {
  TensorDType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {TensorDType::F64, "F64", 8},         {TensorDType::F32, "F32", 4},       {TensorDType::F16, "F16", 2},
    {TensorDType::BF16, "BF16", 2},       {TensorDType::I64, "I64", 8},       {TensorDType::I32, "I32", 4},
    {TensorDType::I16, "I16", 2},         {TensorDType::I8, "I8", 1},         {TensorDType::U8, "U8", 1},
    {TensorDType::BOOL, "BOOL", 1},       {TensorDType::F8_E4M3, "F8_E4M3", 1}, {TensorDType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeInfo& info(TensorDType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d;
  throw std::invalid_argument("unknown TensorDType value");
}

const DTypeInfo* parse_dtype(std::string_view s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return &d;
  return nullptr;
}

std::string tensor_where(const std::string& file, const std::string& tensor) {
  return file + ": tensor '" + tensor + "'";
}

// numel * element size with overflow detection; false on overflow.
bool byte_size(const std::vector<std::int64_t>& shape, std::size_t elem, std::size_t& out) {
  std::size_t n = elem;
  for (auto d : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::size_t>(d), &n)) return false;
  }
  out = n;
  return true;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Parses the header, rejecting duplicate top-level keys (nlohmann would silently keep the last one,
// and a checkpoint with two definitions of a tensor is ambiguous).
json parse_header(const std::string& path, std::string_view text) {
  std::string duplicate;
  std::set<std::string> seen;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  check_json_nesting(text, path);
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    throw InputError(path, "header is not valid JSON: " + clip_text(e.what()));
  }
  if (!duplicate.empty()) throw InputError(tensor_where(path, duplicate), "defined twice in the header");
  if (!j.is_object()) throw InputError(path, "header JSON is not an object");
  return j;
}

// One header entry -> TensorView (data pointer filled by the caller); offsets returned separately.
TensorView parse_entry(const std::string& path, const std::string& name, const json& e, std::size_t buffer_size,
                       std::pair<std::uint64_t, std::uint64_t>& offsets) {
  const auto where = tensor_where(path, name);
  if (!e.is_object()) throw InputError(where, "header entry is not an object");
  if (!e.contains("dtype") || !e["dtype"].is_string()) throw InputError(where, "'dtype' missing or not a string");
  const auto dts = e["dtype"].get<std::string>();
  const DTypeInfo* dt = parse_dtype(dts);
  if (dt == nullptr) throw InputError(where, "unknown dtype '" + dts + "'");

  if (!e.contains("shape") || !e["shape"].is_array()) throw InputError(where, "'shape' missing or not an array");
  TensorView v;
  v.name = name;
  v.dtype = dt->dtype;
  v.file = path;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer()) throw InputError(where, "shape entry " + d.dump() + " is not an integer");
    if (d.is_number_unsigned()) {
      if (d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw InputError(where, "shape entry " + d.dump() + " is too large");
    } else if (d.get<std::int64_t>() < 0) {
      throw InputError(where, "shape has a negative dimension " + d.dump());
    }
    v.shape.push_back(d.get<std::int64_t>());
  }

  if (!e.contains("data_offsets")) throw InputError(where, "'data_offsets' missing");
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw InputError(where, "'data_offsets' must be [begin, end] with non-negative integers, got " + off.dump());
  const auto begin = off[0].get<std::uint64_t>();
  const auto end = off[1].get<std::uint64_t>();
  if (begin > end)
    throw InputError(where, "data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
  if (end > buffer_size)
    throw InputError(where, "data_offsets end " + std::to_string(end) + " is past the data buffer (" +
                                std::to_string(buffer_size) + " bytes)");
  std::size_t expected = 0;
  // The element count must fit int64 too (TensorView::numel, torch): a shape like [2^62, 3, 0] has
  // 0 bytes, so byte_size alone let it through (fuzz/safetensors_fuzz.cpp checks numel).
  std::int64_t numel = 1;
  bool numel_overflow = false;
  for (auto d : v.shape) numel_overflow = numel_overflow || __builtin_mul_overflow(numel, d, &numel);
  if (numel_overflow || !byte_size(v.shape, dt->size, expected))
    throw InputError(where, "shape " + shape_str(v.shape) + " is too large");
  if (end - begin != expected)
    throw InputError(where, "data_offsets span " + std::to_string(end - begin) + " bytes but " + dts + " " +
                                shape_str(v.shape) + " needs " + std::to_string(expected));
  v.nbytes = expected;
  offsets = {begin, end};
  return v;
}

}  // namespace

const char* to_string(TensorDType t) { return info(t).name; }
std::size_t element_size(TensorDType t) { return info(t).size; }

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

TensorView slice_view(const TensorView& v, int dim, std::int64_t begin, std::int64_t end,
                      std::vector<std::byte>& storage) {
  const std::string where = v.file + ": tensor '" + v.name + "'";
  if (v.shape.empty() || v.shape.size() > 2 || dim < 0 || dim >= static_cast<int>(v.shape.size())) {
    throw InputError(where, "cannot take a part of dimension " + std::to_string(dim) + " of shape " + shape_str(v.shape));
  }
  if (begin < 0 || begin > end || end > v.shape[dim]) {
    throw InputError(where, "part [" + std::to_string(begin) + ", " + std::to_string(end) + ") of dimension " +
                                std::to_string(dim) + " is outside shape " + shape_str(v.shape));
  }
  const std::size_t elem = element_size(v.dtype);
  TensorView part = v;
  part.shape[dim] = end - begin;
  const std::int64_t rows = v.shape.size() == 2 ? v.shape[0] : 1;
  const std::int64_t cols = v.shape.size() == 2 ? v.shape[1] : v.shape[0];
  if (dim == 0) {
    const std::size_t row_bytes = v.shape.size() == 2 ? static_cast<std::size_t>(cols) * elem : elem;
    part.data = v.data + static_cast<std::size_t>(begin) * row_bytes;
    part.nbytes = static_cast<std::size_t>(end - begin) * row_bytes;
    return part;
  }
  const std::size_t part_row = static_cast<std::size_t>(end - begin) * elem;
  storage.resize(static_cast<std::size_t>(rows) * part_row);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(storage.data() + static_cast<std::size_t>(r) * part_row,
                v.data + (static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(begin)) * elem,
                part_row);
  }
  part.data = storage.data();
  part.nbytes = storage.size();
  return part;
}

// ---------------------------------------------------------------------------------------------------
// SafetensorsFile

TensorFile::TensorFile(const std::string& path, std::size_t min_size, const char* min_size_what) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw InputError(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path, "not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < min_size) {
    ::close(fd);
    throw InputError(path, "file is " + std::to_string(size) + " bytes, shorter than " + min_size_what);
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) throw InputError(path, std::string("cannot mmap: ") + std::strerror(map_err));
  map_ = m;
  map_size_ = size;
}

TensorFile::~TensorFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const TensorView* TensorFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// The base class unmaps the file when this constructor throws.
SafetensorsFile::SafetensorsFile(const std::string& path) : TensorFile(path, 8, "the 8-byte header length") {
  const std::size_t size = mapped_size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(mapped_data());
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  if (header_len > size - 8)
    throw InputError(path, "header length " + std::to_string(header_len) + " is larger than the file (" +
                               std::to_string(size) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), header_len);
  const json header = parse_header(path, text);
  const std::byte* buffer = mapped_data() + 8 + header_len;
  const std::size_t buffer_size = size - 8 - header_len;

  std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, std::string>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw InputError(path, "__metadata__ is not an object");
      for (const auto& [k, val] : entry.items()) {
        if (!val.is_string()) throw InputError(path, "__metadata__ value of '" + k + "' is not a string");
        metadata_[k] = val.get<std::string>();
      }
      continue;
    }
    std::pair<std::uint64_t, std::uint64_t> off;
    TensorView v = parse_entry(path, name, entry, buffer_size, off);
    v.data = buffer + off.first;
    ranges.push_back({off, name});
    tensors_.emplace(name, std::move(v));
  }

  // Overlap check: sort by begin; an empty tensor occupies no bytes and cannot overlap.
  std::sort(ranges.begin(), ranges.end());
  const std::pair<std::uint64_t, std::uint64_t>* prev = nullptr;
  const std::string* prev_name = nullptr;
  for (const auto& [r, name] : ranges) {
    if (r.first == r.second) continue;
    if (prev != nullptr && r.first < prev->second)
      throw InputError(tensor_where(path, name), "data overlaps tensor '" + *prev_name + "'");
    prev = &r;
    prev_name = &name;
  }
}

// ---------------------------------------------------------------------------------------------------
// Checkpoint

namespace {

std::unique_ptr<TensorFile> open_safetensors(const std::string& path) { return std::make_unique<SafetensorsFile>(path); }
std::unique_ptr<TensorFile> open_torch_bin(const std::string& path) { return std::make_unique<TorchBinFile>(path); }

// The checkpoint layouts, in the order of preference (transformers loads safetensors before
// pytorch_model.bin when a directory has both).
struct CheckpointLayout {
  const char* index;   // the sharded form's index: {"weight_map": {tensor: shard file}}
  const char* single;  // the one-file form
  std::unique_ptr<TensorFile> (*open)(const std::string& path);
};
constexpr CheckpointLayout kLayouts[] = {
    {"model.safetensors.index.json", "model.safetensors", open_safetensors},
    {"pytorch_model.bin.index.json", "pytorch_model.bin", open_torch_bin},
};

}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw InputError(dir, "checkpoint directory does not exist or is not a directory");
  for (const CheckpointLayout& layout : kLayouts) {
    if (fs::exists(d / layout.index, ec)) {
      load_sharded((d / layout.index).string(), layout.open);
      return;
    }
    if (fs::exists(d / layout.single, ec)) {
      files_.push_back(layout.open((d / layout.single).string()));
      for (const auto& [name, view] : files_.back()->tensors()) index_.emplace(name, &view);
      return;
    }
  }
  throw InputError(dir,
                   "no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                   "pytorch_model.bin.index.json in the checkpoint directory");
}

void Checkpoint::load_sharded(const std::string& ip, std::unique_ptr<TensorFile> (*open)(const std::string&)) {
  index_path_ = ip;
  const fs::path d(dir_);
  std::error_code ec;
  const std::string text = read_file(ip);
  check_json_nesting(text, ip);
  json idx;
  try {
    idx = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(ip, "not valid JSON: " + clip_text(e.what()));
  }
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    throw InputError(ip, "expected an object with a \"weight_map\" object");
  const auto& wm = idx["weight_map"];

  // Open each shard once, in name order.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [tensor, shard] : wm.items()) {
    if (!shard.is_string()) throw InputError(tensor_where(ip, tensor), "weight_map value is not a string");
    const auto s = shard.get<std::string>();
    const fs::path rel(s);
    if (s.empty() || rel.is_absolute() || std::find(rel.begin(), rel.end(), fs::path("..")) != rel.end())
      throw InputError(tensor_where(ip, tensor), "shard name '" + s + "' must be a file name inside the directory");
    by_shard[s].push_back(tensor);
  }
  if (by_shard.empty()) throw InputError(ip, "weight_map is empty");
  for (const auto& [shard, listed] : by_shard) {
    const fs::path sp = d / shard;
    if (!fs::is_regular_file(sp, ec))
      throw InputError(ip, "shard '" + shard + "' (for tensor '" + listed.front() + "') does not exist");
    files_.push_back(open(sp.string()));
    const TensorFile& f = *files_.back();
    for (const auto& t : listed) {
      if (f.find(t) == nullptr)
        throw InputError(tensor_where(ip, t), "listed in shard '" + shard + "' but absent from " + f.path());
    }
    for (const auto& [name, view] : f.tensors()) {
      auto [it, inserted] = index_.emplace(name, &view);
      if (!inserted) throw InputError(tensor_where(f.path(), name), "duplicate: also in " + it->second->file);
      if (!wm.contains(name)) throw InputError(tensor_where(f.path(), name), "not listed in " + ip);
    }
  }
}

bool is_weight_file(const std::string& name) {
  const std::string ext = fs::path(name).extension().string();
  if (ext == ".safetensors" || ext == ".bin") return true;
  for (const CheckpointLayout& layout : kLayouts) {
    if (name == layout.index) return true;
  }
  return false;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, v] : index_) out.push_back(name);
  return out;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (v == nullptr) throw InputError(tensor_where(dir_, name), "missing from the checkpoint");
  return *v;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> Checkpoint::input_files() const {
  std::vector<std::string> out = files();
  if (!index_path_.empty()) out.push_back(index_path_);
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });

  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    const auto where = tensor_where(path, t.name);
    if (t.name.empty() || t.name == "__metadata__") throw InputError(where, "invalid tensor name");
    if (i > 0 && order[i - 1]->name == t.name) throw InputError(where, "tensor given twice");
    for (auto d : t.shape)
      if (d < 0) throw InputError(where, "negative dimension in shape " + shape_str(t.shape));
    std::size_t expected = 0;
    if (!byte_size(t.shape, element_size(t.dtype), expected) || expected != t.data.size())
      throw InputError(where, std::to_string(t.data.size()) + " data bytes for " + to_string(t.dtype) + " " +
                                  shape_str(t.shape));
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path, std::string("cannot open for writing: ") + std::strerror(errno));
  unsigned char len[8];
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto* t : order) out.write(reinterpret_cast<const char*>(t->data.data()), static_cast<std::streamsize>(t->data.size()));
  out.close();
  if (!out) throw InputError(path, "write failed");
}

void copy_tensors_except(const Checkpoint& ckpt, const std::set<std::string>& skip, std::vector<TensorToWrite>& out) {
  for (const auto& name : ckpt.names()) {
    if (skip.count(name)) continue;
    const TensorView& v = ckpt.get(name);
    TensorToWrite t{name, v.dtype, v.shape, std::vector<std::byte>(v.nbytes)};
    std::memcpy(t.data.data(), v.data, v.nbytes);
    out.push_back(std::move(t));
  }
}

}  // namespace evalrun
