// Checkpoints: memory-mapped reading of one safetensors file or of a sharded directory
// (model.safetensors.index.json; torch.save's pytorch_model.bin too), and writing safetensors (for `evalrun make-model` and tests).
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer; offsets are relative to the buffer's start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace evalrun {

enum class TensorDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };
const char* to_string(TensorDType);       // "F32", ...
std::size_t element_size(TensorDType);

// A view of one tensor's bytes inside a mapped file. Valid while the owning file/checkpoint lives.
struct TensorView {
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;
  std::string file;  // the file it lives in (for error messages)
  std::int64_t numel() const;
};

// Elements [begin, end) of dimension `dim` (0 or 1) of a 1-D or 2-D tensor, for a tensor-parallel rank
// that holds one part of a weight. Along dimension 0 the part is contiguous and the view points into
// the same mapping; along dimension 1 only the part's bytes are copied, into `storage`, which must
// outlive the view. An out-of-range part is an InputError naming the tensor.
TensorView slice_view(const TensorView& v, int dim, std::int64_t begin, std::int64_t end,
                      std::vector<std::byte>& storage);

// A file of named tensors mapped read-only: a .safetensors file, or a torch.save zip archive
// (io/torch_bin.hpp). Every TensorView points into the mapping.
class TensorFile {
 public:
  virtual ~TensorFile();
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr if absent
  // The whole mapped file: every TensorView lies inside it.
  const std::byte* mapped_data() const { return static_cast<const std::byte*>(map_); }
  std::size_t mapped_size() const { return map_size_; }

 protected:
  // Maps `path` (InputError naming it if it cannot be opened, is not a regular file or is shorter than
  // min_size bytes).
  TensorFile(const std::string& path, std::size_t min_size, const char* min_size_what);

  std::string path_;
  std::map<std::string, TensorView> tensors_;

 private:
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
};

// One .safetensors file. Every header error (truncated file, bad JSON, unknown dtype, offsets past the
// end or overlapping, size != numel * element size) is an InputError naming the file and the tensor.
class SafetensorsFile : public TensorFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory, in the order transformers' from_pretrained looks for them:
// model.safetensors.index.json + its shards, model.safetensors, pytorch_model.bin.index.json + its
// shards, pytorch_model.bin (torch.save's zip format, read without running any pickled code:
// io/torch_bin.hpp). An index naming a missing shard, or a tensor that is not in the shard the index
// names, is an error.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;                  // sorted
  const TensorView* find(const std::string& name) const;   // nullptr if absent
  const TensorView& get(const std::string& name) const;    // InputError "tensor 'x' missing" if absent
  std::vector<std::string> files() const;                   // the tensor files, sorted
  // Every file the checkpoint was read from: files() and, when sharded, the index (sorted). What the
  // run's fingerprint hashes, so a file the loader did not choose (a pytorch_model.bin beside
  // model.safetensors) does not change it.
  std::vector<std::string> input_files() const;

 private:
  void load_sharded(const std::string& index_path, std::unique_ptr<TensorFile> (*open)(const std::string&));

  std::string dir_;
  std::string index_path_;  // "" unless sharded
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Whether a file name in a checkpoint directory holds weights or their index: *.safetensors, *.bin,
// model.safetensors.index.json, pytorch_model.bin.index.json (for the run's fingerprint, the inputs a
// run must not overwrite, and what `evalrun quantize` does not copy along).
bool is_weight_file(const std::string& name);

// Writing. Tensors are written in name order with 8-byte-aligned header padding (spaces), as the
// reference implementation does.
struct TensorToWrite {
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  // little-endian, row-major
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// Appends a copy of every tensor of `ckpt` whose name is not in `skip` (a rewritten checkpoint keeps
// what it does not replace).
void copy_tensors_except(const Checkpoint& ckpt, const std::set<std::string>& skip, std::vector<TensorToWrite>& out);

}  // namespace evalrun
