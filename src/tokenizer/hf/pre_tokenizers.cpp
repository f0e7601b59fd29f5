// tokenizer.json pre-tokenizers: each splits every piece of text into smaller pieces (the model sees
// one piece at a time), and ByteLevel / Metaspace also rewrite the characters.
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {
namespace {

std::vector<NString> split_pattern(const NString& s, const Pattern& p, Behavior b, bool invert) {
  std::vector<NString> out;
  for (const auto& [x, y] : apply_behavior(tile_matches(p.find_all(s.s), s.size(), invert), b)) out.push_back(s.slice(x, y));
  return out;
}

template <class F>
void each_piece(std::vector<NString>& pieces, F&& split) {
  std::vector<NString> out;
  out.reserve(pieces.size());
  for (const NString& p : pieces) {
    for (NString& q : split(p)) {
      if (q.size() > 0) out.push_back(std::move(q));
    }
  }
  pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  Split(Pattern p, Behavior b, bool invert) : p_(std::move(p)), b_(b), invert_(invert) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    each_piece(pieces, [&](const NString& s) { return split_pattern(s, p_, b_, invert_); });
  }

 private:
  Pattern p_;
  Behavior b_;
  bool invert_;
};

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool prefix, bool use_regex, const JsonPath& at)
      : prefix_(prefix), use_regex_(use_regex), re_(Pattern::regex(kGpt2Pattern, at)) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    if (!prefix_ && !use_regex_) {  // Llama 3: an earlier Split cut the pieces, this maps their bytes
      for (NString& p : pieces) to_bytes(p);
      return;
    }
    each_piece(pieces, [&](const NString& in) {
      std::vector<NString> parts;
      if (prefix_ && (in.size() == 0 || in.s[0] != U' ')) {
        NString sp;
        sp.s = U" ";
        sp.align.push_back(in.size() ? in.align[0] : std::pair{0, 0});
        sp.append(in);
        parts.push_back(std::move(sp));
      } else {
        parts.push_back(in);
      }
      if (use_regex_) parts = split_pattern(parts.front(), re_, Behavior::Isolated, false);
      for (NString& p : parts) to_bytes(p);
      return parts;
    });
  }

 private:
  // Each UTF-8 byte of p becomes its printable stand-in, aligned to the character it belongs to: in
  // place when every character is one byte (the common case), else into a longer string.
  static void to_bytes(NString& p) {
    std::size_t wide = 0;
    for (char32_t c : p.s) wide += c >= 0x80;
    if (wide == 0) {
      for (char32_t& c : p.s) c = byte_to_char(static_cast<unsigned char>(c));
      return;
    }
    NString b;
    b.s.reserve(p.size() + 3 * wide);
    b.align.reserve(p.size() + 3 * wide);
    std::string u8;
    for (std::size_t i = 0; i < p.size(); ++i) {
      u8.clear();
      append_utf8(u8, p.s[i]);
      for (unsigned char c : u8) {
        b.s.push_back(byte_to_char(c));
        b.align.push_back(p.align[i]);
      }
    }
    p = std::move(b);
  }

  bool prefix_, use_regex_;
  Pattern re_;
};

class CharSplit : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> pred, Behavior b) : pred_(std::move(pred)), b_(b) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    each_piece(pieces, [&](const NString& s) { return split_chars(s, pred_, b_); });
  }

 private:
  std::function<bool(char32_t)> pred_;
  Behavior b_;
};

class Metaspace : public PreTokenizer {
 public:
  enum Scheme { Always, First, Never };
  Metaspace(char32_t rep, Scheme scheme, bool split) : rep_(rep), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    each_piece(pieces, [&](const NString& in) {
      NString s = in;
      for (char32_t& c : s.s) {
        if (c == U' ') c = rep_;
      }
      const bool starts_input = s.size() > 0 && s.align[0].first == 0;
      const bool prepend = scheme_ == Always || (scheme_ == First && starts_input);
      if (prepend && (s.size() == 0 || s.s[0] != rep_)) {
        NString p;
        p.s.push_back(rep_);
        p.align.push_back(s.size() ? s.align[0] : std::pair{0, 0});
        p.append(s);
        s = std::move(p);
      }
      if (!split_) return std::vector<NString>{s};
      const char32_t rep = rep_;
      return split_chars(s, [rep](char32_t c) { return c == rep; }, Behavior::MergedWithNext);
    });
  }

 private:
  char32_t rep_;
  Scheme scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// Two stages as one (BertPreTokenizer is whitespace split then punctuation).
class Pair : public PreTokenizer {
 public:
  Pair(std::unique_ptr<PreTokenizer> a, std::unique_ptr<PreTokenizer> b) : a_(std::move(a)), b_(std::move(b)) {}
  void pre_tokenize(std::vector<NString>& pieces) const override {
    a_->pre_tokenize(pieces);
    b_->pre_tokenize(pieces);
  }

 private:
  std::unique_ptr<PreTokenizer> a_, b_;
};

using Ptr = std::unique_ptr<PreTokenizer>;

}  // namespace

const std::vector<Registration<PreTokenizer>>& pre_tokenizer_table() {
  static const std::vector<Registration<PreTokenizer>> table = {
      {"Split", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<Split>(Pattern::from_json(get_required(j, at, "pattern"), at / "pattern"),
                                        behavior_from_json(get_required(j, at, "behavior"), at / "behavior"),
                                        get_bool(j, at, "invert", false));
       }},
      {"ByteLevel", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<ByteLevel>(get_bool(j, at, "add_prefix_space", true), get_bool(j, at, "use_regex", true), at);
       }},
      {"Digits", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         return std::make_unique<CharSplit>([](char32_t c) { return is_numeric(c); },
                                            get_bool(j, at, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous);
       }},
      {"Metaspace", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         const std::u32string rep = nstring_from_utf8(get_string(j, at, "replacement", "\u2581")).s;
         if (rep.size() != 1) fail(at / "replacement", "expected one character");
         Metaspace::Scheme scheme = get_bool(j, at, "add_prefix_space", true) ? Metaspace::Always : Metaspace::Never;
         if (j.contains("prepend_scheme")) {
           const std::string s = get_string(j, at, "prepend_scheme", "always");
           if (s == "always") scheme = Metaspace::Always;
           else if (s == "first") scheme = Metaspace::First;
           else if (s == "never") scheme = Metaspace::Never;
           else fail(at / "prepend_scheme", json(s).dump() + " is not supported (supported: always, first, never)");
         }
         return std::make_unique<Metaspace>(rep[0], scheme, get_bool(j, at, "split", true));
       }},
      {"Whitespace", [](const json&, const JsonPath& at, const BuildContext&) -> Ptr {
         // The crate's \w+|[^\w\s]+, keeping the matches (invert + Removed drops what lies between them).
         // It is compiled by Rust's regex crate there, whose \w is Alphabetic, marks, Nd, Pc and the joiners.
         const std::string w = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
         return std::make_unique<Split>(Pattern::regex("[" + w + "]+|[^" + w + "\\s]+", at), Behavior::Removed, true);
       }},
      {"WhitespaceSplit", [](const json&, const JsonPath&, const BuildContext&) -> Ptr {
         return std::make_unique<CharSplit>(is_rust_whitespace, Behavior::Removed);
       }},
      {"Punctuation", [](const json& j, const JsonPath& at, const BuildContext&) -> Ptr {
         const Behavior b = j.contains("behavior") ? behavior_from_json(j["behavior"], at / "behavior") : Behavior::Isolated;
         return std::make_unique<CharSplit>(is_punctuation, b);
       }},
      {"BertPreTokenizer", [](const json&, const JsonPath&, const BuildContext&) -> Ptr {
         return std::make_unique<Pair>(std::make_unique<CharSplit>(is_rust_whitespace, Behavior::Removed),
                                       std::make_unique<CharSplit>(is_punctuation, Behavior::Isolated));
       }},
      {"Sequence", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> Ptr {
         return std::make_unique<Sequence>(sequence_parts<PreTokenizer>(j, at, "pretokenizers", ctx, make_pre_tokenizer));
       }},
  };
  return table;
}

}  // namespace evalrun::hf
