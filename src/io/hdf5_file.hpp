// Thin RAII layer over the HDF5 C API for result files (writer) and reference files (reader).
// Rank 0 writes a result file with the serial API; the rows of its vocabulary-wide datasets are
// written by every rank into the space create_rows allocated for them (io/rank_rows.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace evalrun {

// Writes a new HDF5 file under a temporary name next to `final_path` and renames it into place on
// commit(); a writer destroyed without commit() removes its temporary file, so a failed run never
// replaces or truncates an earlier good result. Parent groups of a path are created on demand.
// Every dataset may be chunked + deflate-compressed (level 4) when it has more than `kChunkMin`
// elements (write_rows: chunked only); `row_chunk` sets how many leading-dimension rows go into one
// chunk (0 = automatic).
// The element types of datasets whose rows other processes write (create_rows).
enum class RowType : std::uint8_t { f32, u16, i64 };
std::size_t row_type_bytes(RowType type);

class H5Writer {
 public:
  static constexpr std::int64_t kChunkMin = 4096;  // datasets with more elements are chunked + compressed

  explicit H5Writer(const std::string& final_path);
  // The same with the temporary file at `temp_path` (a run's rows file, io/rank_rows.hpp).
  H5Writer(const std::string& final_path, const std::string& temp_path);
  // An existing uncommitted file (written and closed by a writer of the same paths) opened to be
  // completed: every dataset in it but `keep` is removed first (what an earlier failed completion
  // left), and it is kept, not removed, when this writer fails (keep_on_failure).
  static H5Writer reopen(const std::string& final_path, const std::string& temp_path, const std::set<std::string>& keep);
  ~H5Writer();
  H5Writer(H5Writer&& other) noexcept;
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;
  H5Writer& operator=(H5Writer&&) = delete;

  void create_group(const std::string& path);

  // dims' product must equal data.size(); dims empty means 1-D.
  void write(const std::string& path, const std::vector<float>& data, std::vector<std::int64_t> dims = {},
             std::int64_t row_chunk = 0);
  // Rows chunked like write() but not compressed: deflate saved 15-25% of float32 logits (more of a
  // bf16 run's) and inflating them was most of `evalrun compare`'s time.
  void write_rows(const std::string& path, const std::vector<float>& data, std::vector<std::int64_t> dims,
                  std::int64_t row_chunk = 0);
  void write_rows(const std::string& path, const std::vector<std::uint16_t>& data, std::vector<std::int64_t> dims,
                  std::int64_t row_chunk = 0);
  // A contiguous [rows, cols] dataset, its file space allocated now and left unwritten, and the byte
  // offset of that space in the file (0 when it is empty): other processes write its rows there
  // (io/rank_rows.hpp), before or after close().
  std::uint64_t create_rows(const std::string& path, RowType type, std::int64_t rows, std::int64_t cols);
  // The same offset of such a dataset already in the file (reopen); InputError naming the file and
  // dataset when it is missing or not a contiguous [rows, cols] dataset of `type`.
  std::uint64_t rows_offset(const std::string& path, RowType type, std::int64_t rows, std::int64_t cols) const;
  void write(const std::string& path, const std::vector<double>& data, std::vector<std::int64_t> dims = {},
             std::int64_t row_chunk = 0);
  void write(const std::string& path, const std::vector<std::int64_t>& data, std::vector<std::int64_t> dims = {},
             std::int64_t row_chunk = 0);
  void write(const std::string& path, const std::vector<std::int32_t>& data, std::vector<std::int64_t> dims = {},
             std::int64_t row_chunk = 0);
  void write(const std::string& path, const std::vector<std::uint64_t>& data, std::vector<std::int64_t> dims = {},
             std::int64_t row_chunk = 0);
  // IEEE half precision stored as HDF5's 16-bit float type (h5py reads it as float16); input is the
  // raw binary16 bit patterns.
  void write_f16(const std::string& path, const std::vector<std::uint16_t>& bits, std::vector<std::int64_t> dims,
                 std::int64_t row_chunk = 0);
  // Variable-length UTF-8 strings.
  void write_strings(const std::string& path, const std::vector<std::string>& data);
  // Ragged rows as a group holding `values` (flat) and `offsets` (uint64, N+1 entries).
  void write_ragged(const std::string& group, const std::vector<std::vector<std::int64_t>>& rows);
  void write_ragged(const std::string& group, const std::vector<std::vector<float>>& rows);

  // Attributes on a group or dataset ("/" is the root).
  void set_attr(const std::string& object, const std::string& name, const std::string& value);
  void set_attr(const std::string& object, const std::string& name, std::int64_t value);
  void set_attr(const std::string& object, const std::string& name, double value);

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }
  // Flushes and closes the temporary file, keeping it (not yet committed) for the ranks' rows.
  void close();
  void commit();  // close() unless closed, then rename over final_path
  // Not committed, this writer's temporary file stays where it is (a run's rows file, which a resumed
  // run completes) instead of being removed.
  void keep_on_failure() { keep_on_failure_ = true; }

 private:
  H5Writer() = default;
  std::string final_path_;
  std::string temp_path_;
  std::int64_t file_ = -1;
  bool committed_ = false;
  bool keep_on_failure_ = false;
};

// Closes every HDF5 object still open and shuts the library down (H5close). MPI programs call it
// before MPI_Finalize: the parallel HDF5 build would otherwise shut itself down inside MPI_Finalize.
// Returns false, touching nothing, when a file's close failed (a full disk): HDF5 1.10 then holds a
// half-destroyed file object and crashes (SIGSEGV) in any shutdown, its own inside MPI_Finalize
// included, so the process must end without either (std::_Exit after its message).
bool hdf5_shutdown() noexcept;

template <typename T>
class H5Rows;
class PositionedReader;

// Read-only access. Missing objects and type mismatches are InputErrors naming the file and object.
class H5Reader {
 public:
  explicit H5Reader(const std::string& path);
  ~H5Reader();
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  const std::string& path() const { return path_; }
  bool exists(const std::string& object) const;
  std::vector<std::string> children(const std::string& group) const;  // sorted names
  std::vector<std::int64_t> shape(const std::string& dataset) const;
  bool has_attr(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_names(const std::string& object) const;

  // Numeric reads convert through HDF5's type conversion (e.g. a float16 or float32 dataset can be
  // read as float).
  std::vector<float> read_f32(const std::string& dataset) const;
  std::vector<double> read_f64(const std::string& dataset) const;
  std::vector<std::int64_t> read_i64(const std::string& dataset) const;
  std::vector<std::uint64_t> read_u64(const std::string& dataset) const;
  std::vector<std::string> read_strings(const std::string& dataset) const;  // fixed or variable length
  std::vector<std::vector<std::int64_t>> read_ragged_i64(const std::string& group) const;
  std::vector<std::vector<float>> read_ragged_f32(const std::string& group) const;

  std::string attr_string(const std::string& object, const std::string& name) const;
  std::int64_t attr_int(const std::string& object, const std::string& name) const;
  double attr_double(const std::string& object, const std::string& name) const;

 private:
  template <typename T>
  friend class H5Rows;
  std::string path_;
  std::int64_t file_ = -1;
};

// The rows of a 2-D numeric dataset, read a block of whole chunks at a time, so that a dataset larger
// than memory (every vocabulary logit of a long run) is read once, in order, holding about
// `block_bytes`. T is float, std::int64_t or std::uint16_t (converted by HDF5 as read_f32 / read_i64 do).
template <typename T>
class H5Rows {
 public:
  static constexpr std::size_t kBlockBytes = std::size_t{64} << 20;
  H5Rows(const H5Reader& file, const std::string& dataset, std::size_t block_bytes = kBlockBytes);
  ~H5Rows();
  H5Rows(const H5Rows&) = delete;
  H5Rows& operator=(const H5Rows&) = delete;

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t block_rows() const { return block_rows_; }
  // Row r (0 <= r < rows()), cols() values; the pointer stays valid until the next call.
  const T* row(std::int64_t r);

 private:
  void read_ahead(std::int64_t first);
  void read_block(std::int64_t first, std::int64_t count);

  std::string where_;
  std::int64_t dataset_ = -1;
  std::int64_t rows_ = 0, cols_ = 0, block_rows_ = 1;
  std::int64_t first_ = -1, loaded_ = 0;  // rows [first_, first_ + loaded_) are at loaded_rows_
  const T* loaded_rows_ = nullptr;        // in block_, or in reader_'s buffer
  std::vector<T> block_;
  // A contiguous dataset stored as T is read straight from the file, a block ahead (io/positioned_reader);
  // others (chunked, compressed, converted) through HDF5.
  std::unique_ptr<PositionedReader> reader_;
  std::uint64_t address_ = 0;  // of row 0 in the file
};

}  // namespace evalrun
