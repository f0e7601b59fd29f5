#include "io/hdf5_file.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "common/errors.hpp"
#include "io/positioned_reader.hpp"
#include "io/text_file.hpp"

namespace evalrun {

namespace {

namespace fs = std::filesystem;

static_assert(sizeof(hid_t) == sizeof(std::int64_t), "hid_t is stored as std::int64_t in the header");

// Owns one HDF5 identifier and closes it with the matching H5?close function.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }  // the caller closes it
  bool ok() const { return id_ >= 0; }
  operator hid_t() const { return id_; }  // NOLINT: pass straight to the C API

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// HDF5 prints its error stack to stderr by default; we report through exceptions instead.
void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (e->desc != nullptr && *e->desc != '\0') *out = e->desc;  // walking downward: keeps the innermost
  return 0;
}

// The innermost message of HDF5's current error stack (then cleared), for exception texts.
std::string h5_detail() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  std::replace(msg.begin(), msg.end(), '\n', ' ');  // one line (HDF5's write errors embed a ctime())
  return msg.empty() ? "HDF5 error" : msg;
}

std::string absolute_object(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  std::string out(1, '/');
  out.append(p);
  return out;
}

// True if every component of `path` exists and the last one resolves to an object. H5Lexists alone
// fails when an intermediate group is missing, hence the walk.
bool object_exists(hid_t file, const std::string& path) {
  const std::string p = absolute_object(path);
  std::string cur;
  std::size_t i = 1;
  while (i <= p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) {
      cur.push_back('/');
      cur.append(p, i, j - i);
      if (H5Lexists(file, cur.c_str(), H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    i = j + 1;
  }
  if (cur.empty()) return true;  // the root
  const htri_t r = H5Oexists_by_name(file, cur.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    default: return "unknown";
  }
}

// IEEE binary16, built the way h5py does so h5py reads it as numpy.float16. `order_of` picks the
// byte order (file: little-endian; memory: native).
Id make_f16_type(hid_t order_of) {
  Id t(H5Tcopy(order_of), H5Tclose);
  if (!t.ok() || H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0)
    throw std::runtime_error("HDF5: cannot build the float16 type: " + h5_detail());
  return t;
}

Id make_vlen_utf8_type() {
  Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!t.ok() || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
    throw std::runtime_error("HDF5: cannot build the string type: " + h5_detail());
  return t;
}

// Link creation: make missing parent groups, and store names as UTF-8.
Id make_lcpl() {
  Id p(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(p, 1);
  H5Pset_char_encoding(p, H5T_CSET_UTF8);
  return p;
}

// Copies strings out of a buffer of fixed-length strings of `size` bytes each.
std::vector<std::string> unpack_fixed(const std::vector<char>& buf, std::size_t n, std::size_t size, H5T_str_t pad) {
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const char* s = buf.data() + i * size;
    std::size_t len = 0;
    while (len < size && s[len] != '\0') ++len;
    if (pad == H5T_STR_SPACEPAD)
      while (len > 0 && s[len - 1] == ' ') --len;
    out.emplace_back(s, len);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// H5Writer

namespace {

// How a dataset's bytes lie in the file: contiguous, or (past kChunkMin elements) in row chunks,
// shuffled and deflated or raw.
enum class Storage { contiguous, deflate, raw_chunks };

struct DatasetSpec {
  hid_t mem_type;
  hid_t file_type;
  std::size_t elem_size;
};

std::vector<hsize_t> checked_dims(const std::string& path, std::size_t n, const std::vector<std::int64_t>& dims) {
  if (dims.empty()) return {static_cast<hsize_t>(n)};
  std::vector<hsize_t> out;
  std::size_t prod = 1;
  for (auto d : dims) {
    if (d < 0) throw std::invalid_argument("H5Writer: negative dimension for " + path);
    prod *= static_cast<std::size_t>(d);
    out.push_back(static_cast<hsize_t>(d));
  }
  if (prod != n)
    throw std::invalid_argument("H5Writer: " + path + ": dims hold " + std::to_string(prod) + " elements, data has " +
                                std::to_string(n));
  return out;
}

// Chunk shape: `row_chunk` whole leading-dimension rows, or about 1 MiB worth of rows when 0.
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t elem, std::int64_t row_chunk) {
  std::vector<hsize_t> c = dims;
  std::size_t row_bytes = elem;
  for (std::size_t i = 1; i < dims.size(); ++i) row_bytes *= dims[i];
  hsize_t rows = row_chunk > 0 ? static_cast<hsize_t>(row_chunk)
                               : std::max<hsize_t>(1, (std::size_t{1} << 20) / std::max<std::size_t>(row_bytes, 1));
  c[0] = std::clamp<hsize_t>(rows, 1, dims[0]);
  // HDF5 rejects chunks of 4 GiB or more: shrink the widest dimension until it fits.
  auto bytes = [&] {
    std::size_t b = elem;
    for (auto d : c) b *= d;
    return b;
  };
  while (bytes() >= (std::size_t{1} << 31)) {
    auto it = std::max_element(c.begin(), c.end());
    if (*it <= 1) break;
    *it = (*it + 1) / 2;
  }
  return c;
}

}  // namespace

H5Writer::H5Writer(const std::string& final_path)
    : H5Writer(final_path, final_path + ".tmp." + std::to_string(::getpid())) {}

H5Writer::H5Writer(const std::string& final_path, const std::string& temp_path) : final_path_(final_path) {
  silence_hdf5();
  const fs::path fp(final_path);
  if (fp.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(fp.parent_path(), ec);
    if (ec) throw InputError(final_path, "cannot create directory " + fp.parent_path().string() + ": " + ec.message());
  }
  temp_path_ = temp_path;
  errno = 0;
  const hid_t f = H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    const int err = errno;
    std::error_code ec;
    fs::remove(temp_path_, ec);
    if (is_storage_errno(err)) throw WriteError(final_path, "the result file " + temp_path_, h5_detail());
    throw InputError(final_path, "cannot create HDF5 file " + temp_path_ + ": " + h5_detail());
  }
  file_ = f;
}

namespace {
// Set when an H5Fclose failed: HDF5 1.10 then holds a half-destroyed file object and crashes when it
// shuts down (H5close, or inside MPI_Finalize), so hdf5_shutdown() must leave it alone.
bool g_close_failed = false;
}  // namespace

H5Writer::H5Writer(H5Writer&& o) noexcept
    : final_path_(std::move(o.final_path_)),
      temp_path_(std::move(o.temp_path_)),
      file_(std::exchange(o.file_, -1)),
      committed_(std::exchange(o.committed_, true)),  // the moved-from writer removes nothing
      keep_on_failure_(o.keep_on_failure_) {
  o.temp_path_.clear();
}

H5Writer H5Writer::reopen(const std::string& final_path, const std::string& temp_path, const std::set<std::string>& keep) {
  silence_hdf5();
  H5Writer w;
  w.final_path_ = final_path;
  w.temp_path_ = temp_path;
  w.keep_on_failure_ = true;
  errno = 0;
  const hid_t f = H5Fopen(temp_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) {
    if (is_storage_errno(errno)) throw WriteError(final_path, "the result file " + temp_path, h5_detail());
    throw InputError(temp_path, "cannot open it to complete the result file " + final_path + ": " + h5_detail());
  }
  w.file_ = f;
  std::vector<std::string> stale;  // datasets an earlier, failed completion wrote
  H5Ovisit(
      f, H5_INDEX_NAME, H5_ITER_NATIVE,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back("/" + std::string(name));
        return 0;
      },
      &stale);
  for (const auto& path : stale) {
    if (keep.count(path) == 0 && H5Ldelete(f, path.c_str(), H5P_DEFAULT) < 0) {
      throw std::runtime_error(final_path + ": " + path + ": cannot remove what an earlier completion of " + temp_path +
                               " left: " + h5_detail());
    }
  }
  return w;
}

H5Writer::~H5Writer() {
  if (keep_on_failure_) {
    if (file_ >= 0 && H5Fclose(file_) < 0) g_close_failed = true;
    return;
  }
  if (file_ >= 0) {
    // Not committed (a write failed, or an exception passed): the file is thrown away. Freeing its
    // blocks first gives the close room to write its metadata on a full disk; a failed close is the
    // case HDF5 cannot recover from.
    if (::truncate(temp_path_.c_str(), 0) != 0) {
      // nothing freed: the close may still succeed
    }
    if (H5Fclose(file_) < 0) g_close_failed = true;
  }
  if (!committed_ && !temp_path_.empty()) {
    std::error_code ec;
    fs::remove(temp_path_, ec);
  }
}

namespace {

[[noreturn]] void write_fail(const std::string& file, const std::string& object, const std::string& what) {
  throw std::runtime_error(file + ": " + object + ": " + what + ": " + h5_detail());
}

void require_open(std::int64_t file, const std::string& final_path) {
  if (file < 0) throw std::logic_error("H5Writer for " + final_path + " used after commit()");
}

// Creates the dataset and writes `data`; `allocate_only`: its file space is allocated and left
// unwritten instead, for the ranks' rows (create_rows).
void write_dataset(hid_t file, const std::string& final_path, const std::string& path, const DatasetSpec& spec,
                   const void* data, std::size_t n, const std::vector<std::int64_t>& dims, std::int64_t row_chunk,
                   Storage storage, bool allocate_only = false) {
  const auto hdims = checked_dims(path, n, dims);
  Id space(H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr), H5Sclose);
  if (!space.ok()) write_fail(final_path, path, "cannot create dataspace");
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (storage != Storage::contiguous && n > static_cast<std::size_t>(H5Writer::kChunkMin)) {
    const auto c = chunk_dims(hdims, spec.elem_size, row_chunk);
    if (H5Pset_chunk(dcpl, static_cast<int>(c.size()), c.data()) < 0 ||
        (storage == Storage::deflate && (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, 4) < 0)))
      write_fail(final_path, path, "cannot set chunking/compression");
  }
  if (allocate_only && (H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0 ||
                          H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0))
    write_fail(final_path, path, "cannot set early allocation");
  const Id lcpl = make_lcpl();
  Id ds(H5Dcreate2(file, path.c_str(), spec.file_type, space, lcpl, dcpl, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) write_fail(final_path, path, "cannot create dataset");
  if (!allocate_only && n > 0 && H5Dwrite(ds, spec.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    write_fail(final_path, path, "cannot write dataset");
}

DatasetSpec row_type_spec(RowType type) {
  switch (type) {
    case RowType::f32: return {H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 4};
    case RowType::u16: return {H5T_NATIVE_UINT16, H5T_STD_U16LE, 2};
    case RowType::i64: return {H5T_NATIVE_INT64, H5T_STD_I64LE, 8};
  }
  throw std::logic_error("row_type_spec: unknown RowType");
}

}  // namespace

std::size_t row_type_bytes(RowType type) { return row_type_spec(type).elem_size; }


void H5Writer::create_group(const std::string& path) {
  require_open(file_, final_path_);
  if (object_exists(file_, path)) {
    H5O_info_t info;
    if (H5Oget_info_by_name(file_, absolute_object(path).c_str(), &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_GROUP)
      return;
    throw std::runtime_error(final_path_ + ": " + path + ": exists and is not a group");
  }
  const Id lcpl = make_lcpl();
  Id g(H5Gcreate2(file_, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.ok()) write_fail(final_path_, path, "cannot create group");
}

void H5Writer::write(const std::string& path, const std::vector<float>& data, std::vector<std::int64_t> dims,
                     std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 4}, data.data(), data.size(), dims,
                row_chunk, Storage::deflate);
}
void H5Writer::write_rows(const std::string& path, const std::vector<float>& data, std::vector<std::int64_t> dims,
                          std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 4}, data.data(), data.size(), dims,
                row_chunk, Storage::raw_chunks);
}
void H5Writer::write_rows(const std::string& path, const std::vector<std::uint16_t>& data,
                          std::vector<std::int64_t> dims, std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_UINT16, H5T_STD_U16LE, 2}, data.data(), data.size(), dims,
                row_chunk, Storage::raw_chunks);
}
std::uint64_t H5Writer::create_rows(const std::string& path, RowType type, std::int64_t rows, std::int64_t cols) {
  require_open(file_, final_path_);
  if (rows < 0 || cols < 0) throw std::invalid_argument("H5Writer: negative dimension for " + path);
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  write_dataset(file_, final_path_, path, row_type_spec(type), nullptr, n, {rows, cols}, 0, Storage::contiguous,
                /*allocate_only=*/true);
  if (n == 0) return 0;
  const Id ds(H5Dopen2(file_, absolute_object(path).c_str(), H5P_DEFAULT), H5Dclose);
  const haddr_t offset = ds.ok() ? H5Dget_offset(ds) : HADDR_UNDEF;
  if (offset == HADDR_UNDEF) write_fail(final_path_, path, "no file space allocated for its rows");
  return static_cast<std::uint64_t>(offset);
}
std::uint64_t H5Writer::rows_offset(const std::string& path, RowType type, std::int64_t rows, std::int64_t cols) const {
  require_open(file_, final_path_);
  const std::string where = temp_path_ + ": " + path;
  if (!object_exists(file_, path)) throw InputError(where, "no such dataset (the rows file is not this run's)");
  const Id ds(H5Dopen2(file_, absolute_object(path).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw InputError(where, "is not a readable dataset: " + h5_detail());
  const Id space(H5Dget_space(ds), H5Sclose);
  const Id ftype(H5Dget_type(ds), H5Tclose);
  hsize_t dims[2] = {0, 0};
  const bool shaped = H5Sget_simple_extent_ndims(space) == 2 && H5Sget_simple_extent_dims(space, dims, nullptr) == 2 &&
                      dims[0] == static_cast<hsize_t>(rows) && dims[1] == static_cast<hsize_t>(cols);
  if (!shaped || H5Tequal(ftype, row_type_spec(type).file_type) <= 0) {
    throw InputError(where, "is not the [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] dataset this run lays out (the rows file is not this run's)");
  }
  if (rows == 0 || cols == 0) return 0;
  const haddr_t offset = H5Dget_offset(ds);
  if (offset == HADDR_UNDEF) throw InputError(where, "has no contiguous file space for its rows");
  return static_cast<std::uint64_t>(offset);
}

void H5Writer::write(const std::string& path, const std::vector<double>& data, std::vector<std::int64_t> dims,
                     std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 8}, data.data(), data.size(), dims,
                row_chunk, Storage::deflate);
}
void H5Writer::write(const std::string& path, const std::vector<std::int64_t>& data, std::vector<std::int64_t> dims,
                     std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_INT64, H5T_STD_I64LE, 8}, data.data(), data.size(), dims,
                row_chunk, Storage::deflate);
}
void H5Writer::write(const std::string& path, const std::vector<std::int32_t>& data, std::vector<std::int64_t> dims,
                     std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_INT32, H5T_STD_I32LE, 4}, data.data(), data.size(), dims,
                row_chunk, Storage::deflate);
}
void H5Writer::write(const std::string& path, const std::vector<std::uint64_t>& data, std::vector<std::int64_t> dims,
                     std::int64_t row_chunk) {
  require_open(file_, final_path_);
  write_dataset(file_, final_path_, path, {H5T_NATIVE_UINT64, H5T_STD_U64LE, 8}, data.data(), data.size(), dims,
                row_chunk, Storage::deflate);
}

void H5Writer::write_f16(const std::string& path, const std::vector<std::uint16_t>& bits,
                         std::vector<std::int64_t> dims, std::int64_t row_chunk) {
  require_open(file_, final_path_);
  const Id file_type = make_f16_type(H5T_IEEE_F32LE);
  const Id mem_type = make_f16_type(H5T_NATIVE_FLOAT);
  write_dataset(file_, final_path_, path, {mem_type, file_type, 2}, bits.data(), bits.size(), dims, row_chunk, Storage::deflate);
}

void H5Writer::write_strings(const std::string& path, const std::vector<std::string>& data) {
  require_open(file_, final_path_);
  const Id t = make_vlen_utf8_type();
  std::vector<const char*> ptrs;
  ptrs.reserve(data.size());
  for (const auto& s : data) ptrs.push_back(s.c_str());
  // Not chunked: deflate would only see the heap references, not the string bytes.
  write_dataset(file_, final_path_, path, {t, t, sizeof(char*)}, ptrs.data(), ptrs.size(), {}, 0, Storage::contiguous);
}

namespace {

template <typename T>
void write_ragged_impl(H5Writer& w, const std::string& group, const std::vector<std::vector<T>>& rows) {
  std::vector<T> values;
  std::vector<std::uint64_t> offsets{0};
  offsets.reserve(rows.size() + 1);
  for (const auto& r : rows) {
    values.insert(values.end(), r.begin(), r.end());
    offsets.push_back(values.size());
  }
  w.create_group(group);
  w.write(group + "/values", values);
  w.write(group + "/offsets", offsets);
}

}  // namespace

void H5Writer::write_ragged(const std::string& group, const std::vector<std::vector<std::int64_t>>& rows) {
  write_ragged_impl(*this, group, rows);
}
void H5Writer::write_ragged(const std::string& group, const std::vector<std::vector<float>>& rows) {
  write_ragged_impl(*this, group, rows);
}

namespace {

// Creates (replacing any existing) scalar attribute `name` on `object` and writes one value.
void write_attr(hid_t file, const std::string& final_path, const std::string& object, const std::string& name,
                hid_t file_type, hid_t mem_type, const void* value) {
  Id obj(H5Oopen(file, absolute_object(object).c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj.ok()) write_fail(final_path, object, "cannot open object for attribute '" + name + "'");
  if (H5Aexists(obj, name.c_str()) > 0 && H5Adelete(obj, name.c_str()) < 0)
    write_fail(final_path, object, "cannot replace attribute '" + name + "'");
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id acpl(H5Pcreate(H5P_ATTRIBUTE_CREATE), H5Pclose);
  H5Pset_char_encoding(acpl, H5T_CSET_UTF8);
  Id attr(H5Acreate2(obj, name.c_str(), file_type, space, acpl, H5P_DEFAULT), H5Aclose);
  if (!attr.ok() || H5Awrite(attr, mem_type, value) < 0)
    write_fail(final_path, object, "cannot write attribute '" + name + "'");
}

}  // namespace

void H5Writer::set_attr(const std::string& object, const std::string& name, const std::string& value) {
  require_open(file_, final_path_);
  const Id t = make_vlen_utf8_type();
  const char* p = value.c_str();
  write_attr(file_, final_path_, object, name, t, t, &p);
}
void H5Writer::set_attr(const std::string& object, const std::string& name, std::int64_t value) {
  require_open(file_, final_path_);
  write_attr(file_, final_path_, object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}
void H5Writer::set_attr(const std::string& object, const std::string& name, double value) {
  require_open(file_, final_path_);
  write_attr(file_, final_path_, object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void H5Writer::close() {
  require_open(file_, final_path_);
  // Everything goes to disk in the flush, where a failure (disk full) leaves the file object intact
  // for the destructor to close; the close itself then has nothing left to write.
  if (H5Fflush(file_, H5F_SCOPE_LOCAL) < 0) throw WriteError(final_path_, "the result file " + temp_path_, h5_detail());
  const hid_t f = file_;
  file_ = -1;
  if (H5Fclose(f) < 0) {
    g_close_failed = true;
    throw WriteError(final_path_, "the result file " + temp_path_ + " (closing it)", h5_detail());
  }
}

void H5Writer::commit() {
  if (committed_) throw std::logic_error("H5Writer for " + final_path_ + " committed twice");
  if (file_ >= 0) close();
  std::error_code ec;
  fs::rename(temp_path_, final_path_, ec);
  if (ec) throw WriteError(final_path_, "the result file (renaming " + temp_path_ + " into place)", ec.message());
  committed_ = true;
}

// ---------------------------------------------------------------------------------------------------
// H5Reader

namespace {

std::string where(const std::string& file, const std::string& object) { return file + ": " + object; }

// Opens a dataset, or throws an InputError saying whether it is missing or something else.
Id open_dataset(hid_t file, const std::string& path, const std::string& object) {
  if (!object_exists(file, object)) throw InputError(where(path, object), "no such dataset");
  Id ds(H5Dopen2(file, absolute_object(object).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw InputError(where(path, object), "is not a readable dataset: " + h5_detail());
  return ds;
}

Id open_object(hid_t file, const std::string& path, const std::string& object) {
  if (!object_exists(file, object)) throw InputError(where(path, object), "no such object");
  Id o(H5Oopen(file, absolute_object(object).c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.ok()) throw InputError(where(path, object), "cannot open: " + h5_detail());
  return o;
}

std::size_t npoints(hid_t space, const std::string& w) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) throw InputError(w, "cannot read the dataspace: " + h5_detail());
  return static_cast<std::size_t>(n);
}

// InputError naming `w` unless dataset `ds` holds values of type class `want`.
void require_class(hid_t ds, const std::string& w, H5T_class_t want) {
  const Id ft(H5Dget_type(ds), H5Tclose);
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != want) throw InputError(w, std::string("is a ") + class_name(cls) + " dataset, expected " + class_name(want));
}

template <typename T>
std::vector<T> read_numeric(hid_t file, const std::string& path, const std::string& object, hid_t mem_type,
                            H5T_class_t want) {
  const Id ds = open_dataset(file, path, object);
  require_class(ds, where(path, object), want);
  const Id space(H5Dget_space(ds), H5Sclose);
  std::vector<T> out(npoints(space, where(path, object)));
  if (!out.empty() && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw InputError(where(path, object), "cannot read: " + h5_detail());
  return out;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

}  // namespace

H5Reader::H5Reader(const std::string& path) : path_(path) {
  silence_hdf5();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(path, "no such file");
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw InputError(path, "cannot open as HDF5: " + h5_detail());
  file_ = f;
}

H5Reader::~H5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::exists(const std::string& object) const { return object_exists(file_, object); }

std::vector<std::string> H5Reader::children(const std::string& group) const {
  if (!object_exists(file_, group)) throw InputError(where(path_, group), "no such group");
  Id g(H5Gopen2(file_, absolute_object(group).c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.ok()) throw InputError(where(path_, group), "is not a group: " + h5_detail());
  std::vector<std::string> names;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_link, &names) < 0)
    throw InputError(where(path_, group), "cannot list: " + h5_detail());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::int64_t> H5Reader::shape(const std::string& dataset) const {
  const Id ds = open_dataset(file_, path_, dataset);
  const Id space(H5Dget_space(ds), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw InputError(where(path_, dataset), "cannot read the dataspace: " + h5_detail());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

bool H5Reader::has_attr(const std::string& object, const std::string& name) const {
  const Id o = open_object(file_, path_, object);
  const htri_t r = H5Aexists(o, name.c_str());
  if (r < 0) throw InputError(where(path_, object), "cannot query attribute '" + name + "': " + h5_detail());
  return r > 0;
}

std::vector<std::string> H5Reader::attr_names(const std::string& object) const {
  const Id o = open_object(file_, path_, object);
  std::vector<std::string> names;
  if (H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr, &names) < 0)
    throw InputError(where(path_, object), "cannot list attributes: " + h5_detail());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<float> H5Reader::read_f32(const std::string& dataset) const {
  return read_numeric<float>(file_, path_, dataset, H5T_NATIVE_FLOAT, H5T_FLOAT);
}
std::vector<double> H5Reader::read_f64(const std::string& dataset) const {
  return read_numeric<double>(file_, path_, dataset, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}
std::vector<std::int64_t> H5Reader::read_i64(const std::string& dataset) const {
  return read_numeric<std::int64_t>(file_, path_, dataset, H5T_NATIVE_INT64, H5T_INTEGER);
}
std::vector<std::uint64_t> H5Reader::read_u64(const std::string& dataset) const {
  return read_numeric<std::uint64_t>(file_, path_, dataset, H5T_NATIVE_UINT64, H5T_INTEGER);
}

std::vector<std::string> H5Reader::read_strings(const std::string& dataset) const {
  const std::string w = where(path_, dataset);
  const Id ds = open_dataset(file_, path_, dataset);
  const Id ft(H5Dget_type(ds), H5Tclose);
  const H5T_class_t cls = H5Tget_class(ft);
  if (cls != H5T_STRING) throw InputError(w, std::string("is a ") + class_name(cls) + " dataset, expected string");
  const Id space(H5Dget_space(ds), H5Sclose);
  const std::size_t n = npoints(space, w);
  if (n == 0) return {};

  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem, H5Tget_cset(ft));
  if (H5Tis_variable_str(ft) > 0) {
    H5Tset_size(mem, H5T_VARIABLE);
    std::vector<char*> ptrs(n, nullptr);
    if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0)
      throw InputError(w, "cannot read: " + h5_detail());
    std::vector<std::string> out;
    out.reserve(n);
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data());
    return out;
  }
  const std::size_t size = H5Tget_size(ft);
  const H5T_str_t pad = H5Tget_strpad(ft);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, pad);
  std::vector<char> buf(n * size);
  if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    throw InputError(w, "cannot read: " + h5_detail());
  return unpack_fixed(buf, n, size, pad);
}

namespace {

template <typename T>
std::vector<std::vector<T>> split_ragged(const std::string& w, const std::vector<T>& values,
                                         const std::vector<std::uint64_t>& offsets) {
  if (offsets.empty() || offsets.front() != 0) throw InputError(w, "offsets must start with 0");
  if (offsets.back() != values.size())
    throw InputError(w, "last offset " + std::to_string(offsets.back()) + " != number of values " +
                            std::to_string(values.size()));
  std::vector<std::vector<T>> rows;
  rows.reserve(offsets.size() - 1);
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i + 1] < offsets[i]) throw InputError(w, "offsets decrease at row " + std::to_string(i));
    rows.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                      values.begin() + static_cast<std::ptrdiff_t>(offsets[i + 1]));
  }
  return rows;
}

}  // namespace

namespace {

void require_group(hid_t file, const std::string& path, const std::string& group) {
  if (!object_exists(file, group)) throw InputError(where(path, group), "no such group");
  H5O_info_t info;
  if (H5Oget_info_by_name(file, absolute_object(group).c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_GROUP)
    throw InputError(where(path, group), "is not a group (a ragged array is a group of values + offsets)");
}

}  // namespace

std::vector<std::vector<std::int64_t>> H5Reader::read_ragged_i64(const std::string& group) const {
  require_group(file_, path_, group);
  auto values = read_i64(group + "/values");
  auto offsets = read_u64(group + "/offsets");
  return split_ragged(where(path_, group), values, offsets);
}
std::vector<std::vector<float>> H5Reader::read_ragged_f32(const std::string& group) const {
  require_group(file_, path_, group);
  auto values = read_f32(group + "/values");
  auto offsets = read_u64(group + "/offsets");
  return split_ragged(where(path_, group), values, offsets);
}

// --- H5Rows -----------------------------------------------------------------------------------------

namespace {

template <typename T>
struct RowTraits;
template <>
struct RowTraits<float> {
  static hid_t mem() { return H5T_NATIVE_FLOAT; }
  static constexpr H5T_class_t kClass = H5T_FLOAT;
};
template <>
struct RowTraits<std::int64_t> {
  static hid_t mem() { return H5T_NATIVE_INT64; }
  static constexpr H5T_class_t kClass = H5T_INTEGER;
};
template <>
struct RowTraits<std::uint16_t> {
  static hid_t mem() { return H5T_NATIVE_UINT16; }
  static constexpr H5T_class_t kClass = H5T_INTEGER;
};

}  // namespace

template <typename T>
H5Rows<T>::H5Rows(const H5Reader& file, const std::string& dataset, std::size_t block_bytes)
    : where_(where(file.path(), dataset)) {
  Id ds = open_dataset(file.file_, file.path(), dataset);
  require_class(ds, where_, RowTraits<T>::kClass);
  const Id space(H5Dget_space(ds), H5Sclose);
  if (H5Sget_simple_extent_ndims(space) != 2) throw InputError(where_, "expected a 2-D dataset");
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  rows_ = static_cast<std::int64_t>(dims[0]);
  cols_ = static_cast<std::int64_t>(dims[1]);
  // Blocks of whole chunks: a chunk is decompressed once however the rows are asked for in order.
  std::int64_t chunk_rows = 1;
  const Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  hsize_t chunk[2] = {1, 1};
  if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 2, chunk) == 2)
    chunk_rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk[0]));
  const auto row_bytes = static_cast<std::size_t>(std::max<std::int64_t>(cols_, 1)) * sizeof(T);
  const auto fit = static_cast<std::int64_t>(block_bytes / row_bytes);
  block_rows_ = std::max<std::int64_t>(1, fit / chunk_rows) * chunk_rows;
  // Contiguous, allocated and stored as T (the row datasets evalrun writes): no HDF5 in the way.
  const Id type(H5Dget_type(ds), H5Tclose);
  const haddr_t address = H5Dget_offset(ds);
  if (H5Pget_layout(dcpl) == H5D_CONTIGUOUS && address != HADDR_UNDEF && address % alignof(T) == 0 &&
      H5Tequal(type, RowTraits<T>::mem()) > 0 && rows_ > 0 && cols_ > 0) {
    try {
      reader_ = std::make_unique<PositionedReader>(file.path(),
                                                   static_cast<std::size_t>(std::min(block_rows_, rows_)) * row_bytes);
      address_ = address;
    } catch (const std::system_error&) {
      // HDF5 has the file open: read it through HDF5 then
    }
  }
  dataset_ = ds.release();
  read_ahead(0);
}

template <typename T>
H5Rows<T>::~H5Rows() {
  reader_.reset();
  if (dataset_ >= 0) H5Dclose(dataset_);
}

// The direct reader starts reading the block of rows from `first` (when there is one).
template <typename T>
void H5Rows<T>::read_ahead(std::int64_t first) {
  if (!reader_ || first >= rows_) return;
  const auto row_bytes = static_cast<std::uint64_t>(cols_) * sizeof(T);
  reader_->prefetch(address_ + static_cast<std::uint64_t>(first) * row_bytes,
                    static_cast<std::size_t>(std::min(block_rows_, rows_ - first)) * row_bytes);
}

// Reads rows [first, first + count) to loaded_rows_: from the file directly, asking for the next block
// at once, or through HDF5 (also where the direct read failed for another reason than the file's end).
template <typename T>
void H5Rows<T>::read_block(std::int64_t first, std::int64_t count) {
  first_ = -1;
  loaded_ = 0;
  if (reader_) {
    const auto row_bytes = static_cast<std::uint64_t>(cols_) * sizeof(T);
    try {
      loaded_rows_ = reinterpret_cast<const T*>(reader_->read(address_ + static_cast<std::uint64_t>(first) * row_bytes,
                                                              static_cast<std::size_t>(count) * row_bytes));
      read_ahead(first + count);
      first_ = first;
      loaded_ = count;
      return;
    } catch (const std::system_error& e) {
      // HDF5 reads a dataset cut short by the end of the file as zeros
      if (e.code().value() == ENODATA)
        throw InputError(where_, "cannot read rows " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
                                     ": the file ends before them (cut short?)");
      reader_.reset();
    }
  }
  block_.resize(static_cast<std::size_t>(count * cols_));
  const Id file_space(H5Dget_space(dataset_), H5Sclose);
  const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
  const hsize_t shape[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(cols_)};
  const Id mem_space(H5Screate_simple(2, shape, nullptr), H5Sclose);
  if (!block_.empty() &&
      (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, shape, nullptr) < 0 ||
       H5Dread(dataset_, RowTraits<T>::mem(), mem_space, file_space, H5P_DEFAULT, block_.data()) < 0))
    throw InputError(where_, "cannot read rows " + std::to_string(start[0]) + ".." +
                                 std::to_string(start[0] + shape[0] - 1) + ": " + h5_detail());
  loaded_rows_ = block_.data();
  first_ = first;
  loaded_ = count;
}

template <typename T>
const T* H5Rows<T>::row(std::int64_t r) {
  if (r < 0 || r >= rows_)
    throw InputError(where_, "row " + std::to_string(r) + " asked for, the dataset has " + std::to_string(rows_));
  if (r < first_ || r >= first_ + loaded_) {
    const std::int64_t first = r / block_rows_ * block_rows_;
    read_block(first, std::min(block_rows_, rows_ - first));
  }
  return loaded_rows_ + (r - first_) * cols_;
}

template class H5Rows<float>;
template class H5Rows<std::int64_t>;
template class H5Rows<std::uint16_t>;

namespace {

// Opens attribute `name` of `object`, checking it holds exactly one value of one of the given classes.
Id open_attr(hid_t file, const std::string& path, const std::string& object, const std::string& name,
             std::initializer_list<H5T_class_t> classes, Id& type_out) {
  const std::string w = where(path, object) + ": attribute '" + name + "'";
  const Id o = open_object(file, path, object);
  if (H5Aexists(o, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw InputError(w, "missing");
  }
  Id a(H5Aopen(o, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.ok()) throw InputError(w, "cannot open: " + h5_detail());
  type_out = Id(H5Aget_type(a), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type_out);
  if (std::find(classes.begin(), classes.end(), cls) == classes.end())
    throw InputError(w, std::string("has type class ") + class_name(cls) + ", expected " + class_name(*classes.begin()));
  const Id space(H5Aget_space(a), H5Sclose);
  const std::size_t n = npoints(space, w);
  if (n != 1) throw InputError(w, "holds " + std::to_string(n) + " values, expected one");
  return a;
}

}  // namespace

std::string H5Reader::attr_string(const std::string& object, const std::string& name) const {
  const std::string w = where(path_, object) + ": attribute '" + name + "'";
  Id ft;
  const Id a = open_attr(file_, path_, object, name, {H5T_STRING}, ft);
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem, H5Tget_cset(ft));
  if (H5Tis_variable_str(ft) > 0) {
    H5Tset_size(mem, H5T_VARIABLE);
    char* p = nullptr;
    if (H5Aread(a, mem, &p) < 0) throw InputError(w, "cannot read: " + h5_detail());
    std::string out = p != nullptr ? p : "";
    const Id space(H5Aget_space(a), H5Sclose);
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, &p);
    return out;
  }
  const std::size_t size = H5Tget_size(ft);
  const H5T_str_t pad = H5Tget_strpad(ft);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, pad);
  std::vector<char> buf(size);
  if (H5Aread(a, mem, buf.data()) < 0) throw InputError(w, "cannot read: " + h5_detail());
  return unpack_fixed(buf, 1, size, pad).front();
}

std::int64_t H5Reader::attr_int(const std::string& object, const std::string& name) const {
  Id ft;
  const Id a = open_attr(file_, path_, object, name, {H5T_INTEGER}, ft);
  std::int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0)
    throw InputError(where(path_, object) + ": attribute '" + name + "'", "cannot read: " + h5_detail());
  return v;
}

double H5Reader::attr_double(const std::string& object, const std::string& name) const {
  Id ft;
  const Id a = open_attr(file_, path_, object, name, {H5T_FLOAT, H5T_INTEGER}, ft);
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0)
    throw InputError(where(path_, object) + ": attribute '" + name + "'", "cannot read: " + h5_detail());
  return v;
}

}  // namespace evalrun

namespace evalrun {

bool hdf5_shutdown() noexcept {
  silence_hdf5();
  if (g_close_failed) return false;
  H5close();
  return true;
}

}  // namespace evalrun
