// tokenizer.json decoders: token strings -> text, each stage rewriting the list of strings (the
// crate's decode_chain); the tokenizer joins what is left.
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {
namespace {

// The stand-in characters back to bytes; text that is not made of stand-ins (an added token such as
// "<|eot_id|>") is kept as it is. Invalid UTF-8 becomes U+FFFD, as Python's errors="replace".
class ByteLevel : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const std::u32string cs = nstring_from_utf8(t).s;
      std::string mapped;
      bool all = true;
      for (char32_t c : cs) {
        const int b = char_to_byte(c);
        if (b < 0) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : t;
    }
    tokens.assign(1, utf8_replace_invalid(bytes));
  }
};

class Metaspace : public Decoder {
 public:
  Metaspace(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_first_(strip_first) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string t = replace_all(tokens[i], rep_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
      tokens[i] = std::move(t);
    }
  }

 private:
  std::string rep_;
  bool strip_first_;
};

class WordPiece : public Decoder {
 public:
  WordPiece(std::string prefix, bool clean) : prefix_(std::move(prefix)), clean_(clean) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t = " " + t;  // (not insert(0, " "): GCC 12 -O2 reports a false -Wrestrict there)
      }
      if (clean_) t = clean_up_tokenization(std::move(t));
    }
  }

 private:
  std::string prefix_;
  bool clean_;
};

// Runs of "<0xXX>" tokens become the bytes they name: valid UTF-8 as text, else one U+FFFD per byte.
class ByteFallback : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (std::size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (const std::string& t : tokens) {
      int v = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        try {
          std::size_t used = 0;
          const int x = std::stoi(t.substr(3, 2), &used, 16);
          if (used == 2) v = x;
        } catch (const std::exception&) {
        }
      }
      if (v >= 0) {
        bytes.push_back(static_cast<char>(v));
      } else {
        flush();
        out.push_back(t);
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip : public Decoder {
 public:
  Strip(char32_t c, std::size_t start, std::size_t stop) : c_(c), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const std::u32string cs = nstring_from_utf8(t).s;
      std::size_t b = 0, e = cs.size();
      while (b < start_ && b < e && cs[b] == c_) ++b;
      for (std::size_t k = 0; k < stop_ && e > b && cs[e - 1] == c_; ++k) --e;
      t = to_utf8(std::u32string_view(cs).substr(b, e - b));
    }
  }

 private:
  char32_t c_;
  std::size_t start_, stop_;
};

class Replace : public Decoder {
 public:
  Replace(Pattern p, std::u32string content) : p_(std::move(p)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const std::u32string cs = nstring_from_utf8(t).s;
      std::u32string out;
      std::size_t prev = 0;
      for (const auto& [b, e] : p_.find_all(cs)) {
        if (b == e) continue;
        out.append(cs, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(cs, prev, std::u32string::npos);
      t = to_utf8(out);
    }
  }

 private:
  Pattern p_;
  std::u32string content_;
};

// CTC (speech models): collapse repeats, drop the pad token, word delimiter -> space.
class Ctc : public Decoder {
 public:
  Ctc(std::string pad, std::string delim, bool clean) : pad_(std::move(pad)), delim_(std::move(delim)), clean_(clean) {}
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      if (tokens[i] == pad_) continue;
      std::string t = tokens[i];
      if (clean_) t = replace_all(clean_up_tokenization(std::move(t)), delim_, " ");
      out.push_back(std::move(t));
    }
    tokens = std::move(out);
  }

 private:
  std::string pad_, delim_;
  bool clean_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

using Ptr = std::unique_ptr<Decoder>;

}  // namespace

const std::vector<Registration<Decoder>>& decoder_table() {
  static const std::vector<Registration<Decoder>> table = {
      {"ByteLevel", [](const json&, const JsonPath&, const BuildContext&) -> Ptr { return std::make_unique<ByteLevel>(); }},
      {"Metaspace", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         bool strip = get_bool(j, at, "add_prefix_space", true);
         if (j.contains("prepend_scheme")) strip = get_string(j, at, "prepend_scheme", "always") != "never";
         return std::make_unique<Metaspace>(get_string(j, at, "replacement", "\u2581"), strip);
       }},
      {"WordPiece", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<WordPiece>(get_string(j, at, "prefix", "##"), get_bool(j, at, "cleanup", true));
       }},
      {"ByteFallback", [](const json&, const JsonPath&, const BuildContext&) -> Ptr { return std::make_unique<ByteFallback>(); }},
      {"Fuse", [](const json&, const JsonPath&, const BuildContext&) -> Ptr { return std::make_unique<Fuse>(); }},
      {"Strip", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         const std::u32string c = nstring_from_utf8(get_string(j, at, "content", " ")).s;
         if (c.size() != 1) fail(at / "content", "expected one character");
         const auto start = get_int(j, at, "start", 0), stop = get_int(j, at, "stop", 0);
         if (start < 0 || stop < 0) fail(at, "start and stop must not be negative");
         return std::make_unique<Strip>(c[0], static_cast<std::size_t>(start), static_cast<std::size_t>(stop));
       }},
      {"Replace", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<Replace>(Pattern::from_json(get_required(j, at, "pattern"), at / "pattern"),
                                          nstring_from_utf8(get_string(j, at, "content", "")).s);
       }},
      {"CTC", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<Ctc>(get_string(j, at, "pad_token", "<pad>"), get_string(j, at, "word_delimiter_token", "|"),
                                      get_bool(j, at, "cleanup", true));
       }},
      {"Sequence", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> Ptr {
         return std::make_unique<Sequence>(sequence_parts<Decoder>(j, at, "decoders", ctx, make_decoder));
       }},
  };
  return table;
}

}  // namespace evalrun::hf
