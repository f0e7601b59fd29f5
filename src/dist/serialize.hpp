// Flat little binary buffers for sending work items and results between ranks. Reader and writer
// must agree on the sequence of fields; the reader checks it never runs past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace evalrun {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<std::uint64_t>(v.size());
    buf_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    buf_.append(s);
  }
  std::string take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& buf) : buf_(buf) {}
  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, buf_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    auto n = get<std::uint64_t>();
    if (n > (buf_.size() - pos_) / sizeof(T)) throw std::runtime_error("ByteReader: message truncated");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), buf_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  std::string get_string() {
    auto n = get<std::uint64_t>();
    need(n);
    std::string s = buf_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == buf_.size(); }

 private:
  void need(std::size_t n) const {
    if (n > buf_.size() - pos_) throw std::runtime_error("ByteReader: message truncated");
  }
  const std::string& buf_;
  std::size_t pos_ = 0;
};

// A list of typed records: the count, then each record's own write(). A record type serializes itself
// next to its definition: `void write(ByteWriter&) const` and `static T read(ByteReader&)`, the same
// fields in the same order (tests/unit/task/records_test.cpp round-trips each).
template <class Record>
void put_records(ByteWriter& w, const std::vector<Record>& records) {
  w.put<std::uint64_t>(records.size());
  for (const auto& r : records) r.write(w);
}
template <class Record>
std::vector<Record> get_records(ByteReader& r) {
  const auto n = r.get<std::uint64_t>();
  std::vector<Record> out;
  for (std::uint64_t i = 0; i < n; ++i) out.push_back(Record::read(r));
  return out;
}
// One record as a buffer of its own, and back (the reader must consume all of it).
template <class Record>
std::string to_bytes(const Record& record) {
  ByteWriter w;
  record.write(w);
  return w.take();
}
template <class Record>
Record from_bytes(const std::string& bytes) {
  ByteReader r(bytes);
  Record out = Record::read(r);
  if (!r.done()) throw std::runtime_error("ByteReader: bytes left after a record");
  return out;
}

}  // namespace evalrun
