#include "io/torch_bin.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/errors.hpp"

namespace evalrun {
namespace {

// The unsigned little-endian value of `width` (<= 8) bytes at p: zip fields and pickle arguments.
std::uint64_t little_endian(const unsigned char* p, int width) {
  std::uint64_t v = 0;
  for (int k = width - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

// ---------------------------------------------------------------------------------------------------
// The zip directory. torch.save writes every entry stored (method 0), its data 64-byte aligned, and
// switches to ZIP64 records past 4 GiB; we read the central directory (the local headers only for
// where each entry's data begins).

struct ZipEntry {
  std::uint64_t data = 0;  // offset of the entry's bytes in the file
  std::uint64_t size = 0;
  unsigned method = 0;     // 0 = stored
};

class ZipReader {
 public:
  ZipReader(const unsigned char* bytes, std::size_t size, const std::string& path)
      : b_(bytes), n_(size), path_(path) {}

  std::map<std::string, ZipEntry> entries() const {
    const std::size_t eocd = find_end_record();
    std::uint64_t count = u(eocd + 10, 2), cd_size = u(eocd + 12, 4), cd_offset = u(eocd + 16, 4);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
      // ZIP64: a locator just before the end record points at the ZIP64 end record.
      if (eocd < 20 || u(eocd - 20, 4) != 0x07064b50) fail("ZIP64 end-of-directory locator missing");
      const std::uint64_t z = u(eocd - 20 + 8, 8);
      if (u(z, 4) != 0x06064b50) fail("ZIP64 end-of-directory record missing");
      count = u(z + 32, 8);
      cd_size = u(z + 40, 8);
      cd_offset = u(z + 48, 8);
    }
    if (cd_offset > n_ || cd_size > n_ - cd_offset) fail("central directory lies past the end of the file");
    std::map<std::string, ZipEntry> out;
    std::uint64_t p = cd_offset;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (u(p, 4) != 0x02014b50) fail("central directory entry " + std::to_string(i) + " is malformed");
      ZipEntry e;
      e.method = static_cast<unsigned>(u(p + 10, 2));
      std::uint64_t csize = u(p + 20, 4), usize = u(p + 24, 4), local = u(p + 42, 4);
      const std::uint64_t name_len = u(p + 28, 2), extra_len = u(p + 30, 2), comment_len = u(p + 32, 2);
      need(p + 46, name_len);
      std::string name(reinterpret_cast<const char*>(b_ + p + 46), name_len);
      // ZIP64 extra field (id 1): the 64-bit values of those fields that read 0xFFFFFFFF, in this order.
      std::uint64_t x = p + 46 + name_len;
      const std::uint64_t x_end = x + extra_len;
      need(x, extra_len);
      while (x + 4 <= x_end) {
        const std::uint64_t id = u(x, 2), len = u(x + 2, 2);
        if (x + 4 + len > x_end) fail("entry '" + name + "': extra field past its end");
        if (id == 1) {
          std::uint64_t q = x + 4;
          for (std::uint64_t* field : {&usize, &csize, &local}) {
            if (*field != 0xFFFFFFFF) continue;
            if (q + 8 > x + 4 + len) fail("entry '" + name + "': ZIP64 extra field too short");
            *field = u(q, 8);
            q += 8;
          }
        }
        x += 4 + len;
      }
      if (u(local, 4) != 0x04034b50) fail("entry '" + name + "': local header missing");
      e.data = local + 30 + u(local + 26, 2) + u(local + 28, 2);
      e.size = csize;
      if (e.method == 0 && csize != usize) fail("entry '" + name + "': stored entry with two sizes");
      if (e.data > n_ || e.size > n_ - e.data) fail("entry '" + name + "': data lies past the end of the file");
      if (!out.emplace(name, e).second) fail("entry '" + name + "' appears twice");
      p += 46 + name_len + extra_len + comment_len;
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(path_, "zip archive: " + what); }
  void need(std::uint64_t off, std::uint64_t len) const {
    if (off > n_ || len > n_ - off) fail("truncated (a record at byte " + std::to_string(off) + " runs past the end)");
  }
  std::uint64_t u(std::uint64_t off, int width) const {
    need(off, static_cast<std::uint64_t>(width));
    return little_endian(b_ + off, width);
  }
  std::size_t find_end_record() const {
    // The end record is 22 bytes plus a comment of at most 65535.
    if (n_ >= 22) {
      const std::size_t lowest = n_ - 22 > 65535 ? n_ - 22 - 65535 : 0;
      for (std::size_t i = n_ - 22 + 1; i-- > lowest;) {
        if (u(i, 4) == 0x06054b50) return i;
      }
    }
    if (n_ >= 2 && b_[0] == 0x80 && b_[1] <= 5) {
      throw InputError(path_,
                       "not a zip archive but a bare pickle: the legacy torch.save format (PyTorch < 1.6) is not "
                       "supported; save it again with a current torch.save or as safetensors");
    }
    throw InputError(path_, "not a zip archive (no end-of-central-directory record): not a torch.save file");
  }

  const unsigned char* b_;
  std::size_t n_;
  std::string path_;
};

// ---------------------------------------------------------------------------------------------------
// The pickle machine. Objects live in one arena and refer to each other by index, so memo references
// and even cycles need no ownership and tear down flat.

// The only callables a state dict's pickle names. Anything else is refused when its GLOBAL is read.
enum class Callable { ordered_dict, rebuild_tensor_v2, rebuild_parameter, restore_type_tag };

struct StorageType {
  const char* name;  // torch.<name>
  TensorDType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", TensorDType::F32}, {"DoubleStorage", TensorDType::F64}, {"HalfStorage", TensorDType::F16},
    {"BFloat16Storage", TensorDType::BF16}, {"LongStorage", TensorDType::I64}, {"IntStorage", TensorDType::I32},
    {"ShortStorage", TensorDType::I16}, {"CharStorage", TensorDType::I8}, {"ByteStorage", TensorDType::U8},
    {"BoolStorage", TensorDType::BOOL},
};

enum class Kind { none, boolean, integer, floating, string, tuple, list, dict, callable, storage_type, storage, tensor };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "a bool";
    case Kind::integer: return "an int";
    case Kind::floating: return "a float";
    case Kind::string: return "a string";
    case Kind::tuple: return "a tuple";
    case Kind::list: return "a list";
    case Kind::dict: return "a dict";
    case Kind::callable: return "a function";
    case Kind::storage_type: return "a storage type";
    case Kind::storage: return "a storage";
    case Kind::tensor: return "a tensor";
  }
  return "?";
}

using Ref = std::size_t;

struct Obj {
  Kind kind = Kind::none;
  std::int64_t i = 0;  // bool / int; storage: numel (elements)
  double f = 0;
  std::string s;       // string; storage: key
  std::vector<Ref> items;                   // tuple, list
  std::vector<std::pair<Ref, Ref>> pairs;   // dict, in insertion order
  Callable callable = Callable::ordered_dict;
  TensorDType dtype = TensorDType::F32;     // storage type, storage, tensor
  // tensor
  Ref storage = 0;
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape, stride;
};

// A state dict of a few thousand tensors makes some 10^5 objects; this bounds a hostile pickle's memory.
constexpr std::size_t kMaxObjects = std::size_t{1} << 22;

class Unpickler {
 public:
  Unpickler(const unsigned char* data, std::size_t size, std::string where)
      : d_(data), n_(size), where_(std::move(where)) {}

  // Runs the pickle to its STOP and returns the result.
  Ref run() {
    while (true) {
      if (pos_ >= n_) fail_at(pos_, "ends without STOP (truncated)");
      op_at_ = pos_;
      const unsigned char op = d_[pos_++];
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME: a length hint only
        case '.': {                 // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
          return stack_.back();
        }
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case ')': push_tuple({}); break;                    // EMPTY_TUPLE
        case 't': push_tuple(pop_mark()); break;            // TUPLE
        case 0x85: push_tuple(pop_n(1)); break;             // TUPLE1
        case 0x86: push_tuple(pop_n(2)); break;             // TUPLE2
        case 0x87: push_tuple(pop_n(3)); break;             // TUPLE3
        case ']': push(make(Kind::list)); break;            // EMPTY_LIST
        case 'l': {                                         // LIST
          auto items = pop_mark();
          const Ref r = make(Kind::list);
          objs_[r].items = std::move(items);
          push(r);
          break;
        }
        case 'a': {  // APPEND
          const Ref v = pop();
          objs_[top_of(Kind::list, "APPEND")].items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          auto& list = objs_[top_of(Kind::list, "APPENDS")].items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case '}': push(make(Kind::dict)); break;  // EMPTY_DICT
        case 'd': {                               // DICT
          auto items = pop_mark();
          const Ref r = make(Kind::dict);
          set_items(r, items);
          push(r);
          break;
        }
        case 's': {  // SETITEM
          auto kv = pop_n(2);
          set_items(top_of(Kind::dict, "SETITEM"), kv);
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          set_items(top_of(Kind::dict, "SETITEMS"), kv);
          break;
        }
        case 'N': push(make(Kind::none)); break;
        case 0x88: push_int(Kind::boolean, 1); break;  // NEWTRUE
        case 0x89: push_int(Kind::boolean, 0); break;  // NEWFALSE
        case 'J': push_int(Kind::integer, static_cast<std::int32_t>(little_endian(take(4), 4))); break;  // BININT
        case 'K': push_int(Kind::integer, static_cast<std::int64_t>(little_endian(take(1), 1))); break;  // BININT1
        case 'M': push_int(Kind::integer, static_cast<std::int64_t>(little_endian(take(2), 2))); break;  // BININT2
        case 0x8a: {                                                                          // LONG1
          const auto len = static_cast<int>(little_endian(take(1), 1));
          if (len > 8) fail("LONG1 of " + std::to_string(len) + " bytes (beyond 64 bits)");
          std::uint64_t v = len > 0 ? little_endian(take(static_cast<std::size_t>(len)), len) : 0;
          if (len > 0 && len < 8 && (v >> (8 * len - 1)) != 0) v |= ~std::uint64_t{0} << (8 * len);  // sign
          push_int(Kind::integer, static_cast<std::int64_t>(v));
          break;
        }
        case 'G': {  // BINFLOAT: 8 bytes big-endian
          const unsigned char* p = take(8);
          std::uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | p[k];
          const Ref r = make(Kind::floating);
          std::memcpy(&objs_[r].f, &bits, 8);
          push(r);
          break;
        }
        case 'X': push_string(little_endian(take(4), 4)); break;     // BINUNICODE
        case 0x8c: push_string(little_endian(take(1), 1)); break;    // SHORT_BINUNICODE
        case 0x8d: push_string(little_endian(take(8), 8)); break;    // BINUNICODE8
        case 'c': {                                       // GLOBAL module\nname\n
          const std::string module = line();
          const std::string name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const Ref name = pop(), module = pop();
          if (objs_[name].kind != Kind::string || objs_[module].kind != Kind::string)
            fail("STACK_GLOBAL of a non-string");
          push(global(objs_[module].s, objs_[name].s));
          break;
        }
        case 'q': memo_[static_cast<std::uint32_t>(little_endian(take(1), 1))] = peek(); break;  // BINPUT
        case 'r': memo_[static_cast<std::uint32_t>(little_endian(take(4), 4))] = peek(); break;  // LONG_BINPUT
        case 0x94: memo_[static_cast<std::uint32_t>(memo_.size())] = peek(); break;   // MEMOIZE
        case 'h': push(memo(little_endian(take(1), 1))); break;                                  // BINGET
        case 'j': push(memo(little_endian(take(4), 4))); break;                                  // LONG_BINGET
        case 'Q': push(persistent_load(pop())); break;                                // BINPERSID
        case 'R': {                                                                   // REDUCE
          const Ref args = pop();
          const Ref fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 'b': {  // BUILD: the state of an OrderedDict (its _metadata) or a Parameter; nothing to set
          const Ref state = pop();
          (void)state;
          const Kind k = objs_[peek()].kind;
          if (k != Kind::dict && k != Kind::tensor) fail(std::string("BUILD on ") + kind_name(k));
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("opcode ") + hex +
               " is not one a state dict uses (evalrun reads dicts of tensors only and calls nothing)");
        }
      }
    }
  }

  const Obj& obj(Ref r) const { return objs_[r]; }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    throw InputError(where_ + " byte " + std::to_string(at), what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(op_at_, what); }

  const unsigned char* take(std::size_t len) {
    if (len > n_ - pos_) fail("truncated (an argument runs past the end)");
    const unsigned char* p = d_ + pos_;
    pos_ += len;
    return p;
  }
  std::string line() {
    const void* nl = std::memchr(d_ + pos_, '\n', n_ - pos_);
    if (nl == nullptr) fail("GLOBAL without its newline");
    const auto len = static_cast<std::size_t>(static_cast<const unsigned char*>(nl) - (d_ + pos_));
    std::string s(reinterpret_cast<const char*>(d_ + pos_), len);
    pos_ += len + 1;
    return s;
  }

  Ref make(Kind k) {
    if (objs_.size() >= kMaxObjects) fail("more than " + std::to_string(kMaxObjects) + " objects");
    objs_.push_back(Obj{});
    objs_.back().kind = k;
    return objs_.size() - 1;
  }
  void push(Ref r) { stack_.push_back(r); }
  void push_int(Kind k, std::int64_t v) {
    const Ref r = make(k);
    objs_[r].i = v;
    push(r);
  }
  void push_string(std::uint64_t len) {
    const unsigned char* p = take(len);
    const Ref r = make(Kind::string);
    objs_[r].s.assign(reinterpret_cast<const char*>(p), len);
    push(r);
  }
  void push_tuple(std::vector<Ref> items) {
    const Ref r = make(Kind::tuple);
    objs_[r].items = std::move(items);
    push(r);
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Ref pop() {
    if (stack_.size() <= floor()) fail("pops an empty stack");
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Ref peek() const {
    if (stack_.size() <= floor()) fail("reads an empty stack");
    return stack_.back();
  }
  std::vector<Ref> pop_n(std::size_t k) {
    if (stack_.size() < floor() + k) fail("needs " + std::to_string(k) + " values on the stack");
    std::vector<Ref> out(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
    stack_.resize(stack_.size() - k);
    return out;
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Ref top_of(Kind k, const char* op) const {
    const Ref r = peek();
    if (objs_[r].kind != k) fail(std::string(op) + " on " + kind_name(objs_[r].kind));
    return r;
  }
  void set_items(Ref dict, const std::vector<Ref>& kv) {
    if (kv.size() % 2 != 0) fail("an odd number of dict keys and values");
    for (std::size_t k = 0; k < kv.size(); k += 2) objs_[dict].pairs.emplace_back(kv[k], kv[k + 1]);
  }
  Ref memo(std::uint64_t key) const {
    auto it = memo_.find(static_cast<std::uint32_t>(key));
    if (it == memo_.end()) fail("memo entry " + std::to_string(key) + " was never stored");
    return it->second;
  }

  Ref global(const std::string& module, const std::string& name) {
    std::optional<Callable> c;
    if (module == "collections" && name == "OrderedDict") c = Callable::ordered_dict;
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") c = Callable::rebuild_tensor_v2;
    if (module == "torch._utils" && name == "_rebuild_parameter") c = Callable::rebuild_parameter;
    // libtorch's torch::pickle_save tags a dict with its type: restore_type_tag(dict, "Dict[str, Tensor]").
    if (module == "torch.jit._pickle" && name == "restore_type_tag") c = Callable::restore_type_tag;
    if (c) {
      const Ref r = make(Kind::callable);
      objs_[r].callable = *c;
      return r;
    }
    if (module == "torch") {
      for (const auto& st : kStorageTypes) {
        if (name != st.name) continue;
        const Ref r = make(Kind::storage_type);
        objs_[r].dtype = st.dtype;
        return r;
      }
    }
    fail("pickle global '" + module + "." + name +
         "' is not allowed: evalrun reads a state dict of tensors and never calls what a checkpoint names "
         "(allowed: collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter, "
         "torch.jit._pickle.restore_type_tag, torch.FloatStorage and the other torch.*Storage types)");
  }

  const Obj& arg(const Obj& tuple, std::size_t k, Kind want, const char* what) const {
    const Obj& a = objs_[tuple.items[k]];
    if (a.kind != want) fail(std::string(what) + " is " + kind_name(a.kind) + ", expected " + kind_name(want));
    return a;
  }
  std::vector<std::int64_t> ints(const Obj& tuple, const char* what) const {
    std::vector<std::int64_t> out;
    for (Ref r : tuple.items) {
      if (objs_[r].kind != Kind::integer) fail(std::string(what) + " holds " + kind_name(objs_[r].kind));
      out.push_back(objs_[r].i);
    }
    return out;
  }

  // ('storage', torch.FloatStorage, key, location, numel)
  Ref persistent_load(Ref pid) {
    const Obj& t = objs_[pid];
    if (t.kind != Kind::tuple || t.items.size() != 5) fail("persistent id is not a 5-tuple ('storage', type, key, location, size)");
    if (arg(t, 0, Kind::string, "persistent id tag").s != "storage") fail("persistent id tag is not 'storage'");
    const TensorDType dtype = arg(t, 1, Kind::storage_type, "storage type").dtype;
    std::string key = arg(t, 2, Kind::string, "storage key").s;
    const std::int64_t numel = arg(t, 4, Kind::integer, "storage size").i;
    if (numel < 0) fail("negative storage size");
    const Ref r = make(Kind::storage);
    objs_[r].dtype = dtype;
    objs_[r].s = std::move(key);
    objs_[r].i = numel;
    return r;
  }

  Ref reduce(Ref fn, Ref args_ref) {
    if (objs_[fn].kind != Kind::callable) fail(std::string("REDUCE calls ") + kind_name(objs_[fn].kind));
    const Obj& args = objs_[args_ref];
    if (args.kind != Kind::tuple) fail("REDUCE arguments are not a tuple");
    switch (objs_[fn].callable) {
      case Callable::ordered_dict:
        if (!args.items.empty()) fail("OrderedDict called with arguments");
        return make(Kind::dict);
      case Callable::restore_type_tag:  // (value, type string): the value
        if (args.items.size() != 2) fail("restore_type_tag takes 2 arguments");
        return args.items[0];
      case Callable::rebuild_parameter: {  // (tensor, requires_grad, backward_hooks)
        if (args.items.size() != 3) fail("_rebuild_parameter takes 3 arguments");
        arg(args, 0, Kind::tensor, "_rebuild_parameter's data");
        return args.items[0];
      }
      case Callable::rebuild_tensor_v2: {  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
        if (args.items.size() != 6 && args.items.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments");
        const Obj& storage = arg(args, 0, Kind::storage, "_rebuild_tensor_v2's storage");
        const std::int64_t offset = arg(args, 1, Kind::integer, "_rebuild_tensor_v2's storage offset").i;
        auto shape = ints(arg(args, 2, Kind::tuple, "_rebuild_tensor_v2's size"), "the size");
        auto stride = ints(arg(args, 3, Kind::tuple, "_rebuild_tensor_v2's stride"), "the stride");
        const Ref storage_ref = args.items[0];
        const TensorDType dtype = storage.dtype;
        const Ref r = make(Kind::tensor);  // may move objs_: `args` and `storage` are not used after this
        Obj& t = objs_[r];
        t.storage = storage_ref;
        t.dtype = dtype;
        t.offset = offset;
        t.shape = std::move(shape);
        t.stride = std::move(stride);
        return r;
      }
    }
    fail("REDUCE of an unknown callable");
  }

  const unsigned char* d_;
  std::size_t n_;
  std::string where_;
  std::size_t pos_ = 0, op_at_ = 0;
  std::vector<Obj> objs_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, Ref> memo_;
};

std::string shape_text(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + ")";
}

}  // namespace

TorchBinFile::TorchBinFile(const std::string& path) : TensorFile(path, 22, "a zip archive's 22-byte end record") {
  const auto* bytes = reinterpret_cast<const unsigned char*>(mapped_data());
  const std::map<std::string, ZipEntry> entries = ZipReader(bytes, mapped_size(), path).entries();

  // The archive's records share one prefix directory: <prefix>/data.pkl.
  std::string prefix;
  for (const auto& [name, e] : entries) {
    const auto slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      prefix = name.substr(0, slash + 1);
      break;
    }
  }
  if (prefix.empty()) {
    throw InputError(path, "zip archive without an <archive>/data.pkl entry: not a torch.save file");
  }
  auto stored = [&](const std::string& name) -> const ZipEntry* {
    auto it = entries.find(prefix + name);
    if (it == entries.end()) return nullptr;
    if (it->second.method != 0) {
      throw InputError(path + ": " + it->first, "compressed entry (zip method " + std::to_string(it->second.method) +
                                                    "): torch.save stores its entries uncompressed; evalrun maps "
                                                    "tensors in place and does not inflate");
    }
    return &it->second;
  };
  if (const ZipEntry* order = stored("byteorder")) {
    const std::string_view value(reinterpret_cast<const char*>(bytes + order->data), order->size);
    if (value != "little") {
      throw InputError(path + ": " + prefix + "byteorder",
                       "'" + std::string(value) + "': only little-endian archives are read");
    }
  }
  const ZipEntry& pkl = *stored("data.pkl");
  Unpickler up(bytes + pkl.data, pkl.size, path + ": " + prefix + "data.pkl");
  const Ref root = up.run();
  const Obj& dict = up.obj(root);
  if (dict.kind != Kind::dict) {
    throw InputError(path, std::string("the pickle holds ") + kind_name(dict.kind) +
                               ", not a state dict (a dict of tensor name to tensor)");
  }
  for (const auto& [k, v] : dict.pairs) {
    const Obj& key = up.obj(k);
    if (key.kind != Kind::string) throw InputError(path, std::string("a state dict key is ") + kind_name(key.kind));
    const std::string where = path + ": tensor '" + key.s + "'";
    const Obj& t = up.obj(v);
    if (t.kind != Kind::tensor) {
      throw InputError(where, std::string("is ") + kind_name(t.kind) +
                                  ", not a tensor: evalrun reads a flat state dict (save model.state_dict())");
    }
    if (t.shape.size() != t.stride.size()) throw InputError(where, "size and stride differ in length");
    const Obj& storage = up.obj(t.storage);
    const std::size_t elem = element_size(t.dtype);
    std::int64_t numel = 1;
    bool bad = t.offset < 0;
    for (const std::int64_t d : t.shape) bad = bad || d < 0 || __builtin_mul_overflow(numel, d, &numel);
    // Row-major contiguity (a dimension of size 1 may carry any stride; an empty tensor has no layout).
    std::int64_t expect = 1;
    for (std::size_t d = t.shape.size(); !bad && numel > 0 && d-- > 0;) {
      if (t.shape[d] != 1 && t.stride[d] != expect) {
        throw InputError(where, "not contiguous (size " + shape_text(t.shape) + ", stride " + shape_text(t.stride) +
                                    "): save it after .contiguous()");
      }
      expect *= t.shape[d];  // <= numel: cannot overflow
    }
    std::int64_t end = 0, bytes_needed = 0;
    bad = bad || __builtin_add_overflow(t.offset, numel, &end) ||
          __builtin_mul_overflow(storage.i, static_cast<std::int64_t>(elem), &bytes_needed);
    if (bad || end > storage.i) {
      throw InputError(where, "size " + shape_text(t.shape) + " at offset " + std::to_string(t.offset) +
                                  " does not fit its storage of " + std::to_string(storage.i) + " elements");
    }
    const ZipEntry* data = stored("data/" + storage.s);
    if (data == nullptr) throw InputError(where, "its storage '" + prefix + "data/" + storage.s + "' is not in the archive");
    if (data->size < static_cast<std::uint64_t>(bytes_needed)) {
      throw InputError(where, "storage '" + storage.s + "' holds " + std::to_string(data->size) + " bytes, its " +
                                  to_string(t.dtype) + " size needs " + std::to_string(bytes_needed));
    }
    TensorView view;
    view.name = key.s;
    view.dtype = t.dtype;
    view.shape = t.shape;
    view.data = mapped_data() + data->data + static_cast<std::uint64_t>(t.offset) * elem;
    view.nbytes = static_cast<std::size_t>(numel) * elem;
    view.file = path;
    if (!tensors_.emplace(key.s, std::move(view)).second) throw InputError(where, "appears twice in the state dict");
  }
}

}  // namespace evalrun
