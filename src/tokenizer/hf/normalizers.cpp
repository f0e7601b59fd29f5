// tokenizer.json normalizers. Each rewrites the aligned string in place; every output character keeps
// the span of the input characters it came from, so offsets still point into the original text.
#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstring>

#include "common/errors.hpp"
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {
namespace {

std::u32string to_u32(const icu::UnicodeString& u) {
  std::u32string out(static_cast<std::size_t>(u.countChar32()), U'\0');
  UErrorCode st = U_ZERO_ERROR;
  u.toUTF32(reinterpret_cast<UChar32*>(out.data()), static_cast<int32_t>(out.size()), st);
  return out;
}

// Unicode normalization with ICU, one normalization segment at a time (a character with a boundary
// before it starts a segment) so that each output character aligns to its own segment's input.
class IcuNormalizer : public Normalizer {
 public:
  enum Form { NFC, NFD, NFKC, NFKD };
  explicit IcuNormalizer(Form f) {
    UErrorCode st = U_ZERO_ERROR;
    switch (f) {
      case NFC: n_ = icu::Normalizer2::getNFCInstance(st); break;
      case NFD: n_ = icu::Normalizer2::getNFDInstance(st); break;
      case NFKC: n_ = icu::Normalizer2::getNFKCInstance(st); break;
      case NFKD: n_ = icu::Normalizer2::getNFKDInstance(st); break;
    }
  }
  void normalize(NString& s) const override {
    NString out;
    out.s.reserve(s.size());
    out.align.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t j = i + 1;
      while (j < s.size() && !n_->hasBoundaryBefore(static_cast<UChar32>(s.s[j]))) ++j;
      if (j == i + 1 && s.s[i] < 0x80) {
        // A segment of one ASCII character: no form changes it (ASCII has no decomposition, and alone
        // nothing composes with it), and most text is made of these.
        out.s.push_back(s.s[i]);
        out.align.push_back(s.align[i]);
        i = j;
        continue;
      }
      UErrorCode st = U_ZERO_ERROR;
      const auto seg = icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.s.data() + i),
                                                     static_cast<int32_t>(j - i));
      const std::u32string norm = to_u32(n_->normalize(seg, st));
      const bool same_length = norm.size() == j - i;
      for (std::size_t k = 0; k < norm.size(); ++k) {
        out.s.push_back(norm[k]);
        out.align.push_back(same_length ? s.align[i + k] : std::pair{s.align[i].first, s.align[j - 1].second});
      }
      i = j;
    }
    s = std::move(out);
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
};

// Maps each character to zero or more characters aligned to it.
template <class F>
void map_chars(NString& s, F&& f) {
  NString out;
  out.s.reserve(s.size());
  std::u32string buf;
  for (std::size_t i = 0; i < s.size(); ++i) {
    buf.clear();
    f(s.s[i], buf);
    for (char32_t c : buf) {
      out.s.push_back(c);
      out.align.push_back(s.align[i]);
    }
  }
  s = std::move(out);
}

void lowercase(NString& s) {
  // Rust's char::to_lowercase: the full (not locale-tailored) mapping of each character on its own.
  map_chars(s, [](char32_t c, std::u32string& out) {
    if (c < 128) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
      return;
    }
    auto u = icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(&c), 1);
    out += to_u32(u.toLower(icu::Locale::getRoot()));
  });
}

void strip_marks(NString& s) {
  map_chars(s, [](char32_t c, std::u32string& out) {
    if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
  });
}

class Lowercase : public Normalizer {
 public:
  void normalize(NString& s) const override { lowercase(s); }
};

class StripAccents : public Normalizer {
 public:
  void normalize(NString& s) const override { strip_marks(s); }
};

class Strip : public Normalizer {
 public:
  Strip(bool l, bool r) : left_(l), right_(r) {}
  void normalize(NString& s) const override {
    std::size_t b = 0, e = s.size();
    if (left_) {
      while (b < e && is_rust_whitespace(s.s[b])) ++b;
    }
    if (right_) {
      while (e > b && is_rust_whitespace(s.s[e - 1])) --e;
    }
    s = s.slice(b, e);
  }

 private:
  bool left_, right_;
};

class Replace : public Normalizer {
 public:
  Replace(Pattern p, std::u32string content) : pattern_(std::move(p)), content_(std::move(content)) {}
  void normalize(NString& s) const override {
    NString out;
    std::size_t prev = 0;
    for (const auto& [b, e] : pattern_.find_all(s.s)) {
      if (b == e) continue;
      out.append(s.slice(prev, b));
      for (char32_t c : content_) {
        out.s.push_back(c);
        out.align.emplace_back(s.align[b].first, s.align[e - 1].second);
      }
      prev = e;
    }
    out.append(s.slice(prev, s.size()));
    s = std::move(out);
  }

 private:
  Pattern pattern_;
  std::u32string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::u32string p) : prepend_(std::move(p)) {}
  void normalize(NString& s) const override {
    if (s.size() == 0) return;  // the crate prepends nothing to an empty string
    NString out;
    out.s = prepend_;
    out.align.assign(prepend_.size(), s.align[0]);
    out.append(s);
    s = std::move(out);
  }

 private:
  std::u32string prepend_;
};

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's BasicTokenizer clean-up, as the crate's BertNormalizer.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(NString& s) const override {
    if (clean_) {
      map_chars(s, [](char32_t c, std::u32string& out) {
        const bool control = c != '\t' && c != '\n' && c != '\r' &&
                             (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) != 0;
        if (c == 0 || c == 0xFFFD || control) return;
        out.push_back(is_rust_whitespace(c) ? U' ' : c);
      });
    }
    if (chinese_) {
      map_chars(s, [](char32_t c, std::u32string& out) {
        if (is_cjk(c)) {
          out += U' ';
          out += c;
          out += U' ';
        } else {
          out.push_back(c);
        }
      });
    }
    if (strip_) {
      IcuNormalizer(IcuNormalizer::NFD).normalize(s);
      strip_marks(s);
    }
    if (lower_) lowercase(s);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

// Standard base64 (RFC 4648, with padding), as the crate reads precompiled_charsmap.
std::string base64_decode(const std::string& in, const JsonPath& at) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) fail(at, "is not base64 (its length is not a multiple of 4)");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<std::size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if ((v[k] = value(c)) < 0 || pad > 0) {
        fail(at, "is not base64 (character " + std::to_string(i + static_cast<std::size_t>(k)) + ")");
      }
    }
    const std::uint32_t n = (static_cast<std::uint32_t>(v[0]) << 18) | (static_cast<std::uint32_t>(v[1]) << 12) |
                            (static_cast<std::uint32_t>(v[2]) << 6) | static_cast<std::uint32_t>(v[3]);
    out.push_back(static_cast<char>(n >> 16));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return out;
}

// sentencepiece's precompiled_charsmap: a little-endian u32 trie size in bytes, the trie (a Darts
// double array of u32 units over UTF-8 bytes, each leaf an offset into the strings), then the
// replacement strings, each ended by NUL. Rewritten as the crate does: each extended grapheme cluster
// shorter than 6 bytes is looked up whole (the shortest key it starts with), else char by char.
class Precompiled : public Normalizer {
 public:
  Precompiled(const json& j, const JsonPath& at) : where_((at / "precompiled_charsmap").str()) {
    const JsonPath map_at = at / "precompiled_charsmap";
    const std::string blob = base64_decode(get_string(j, at, "precompiled_charsmap", ""), map_at);
    if (blob.size() < 4) fail(map_at, "holds " + std::to_string(blob.size()) + " bytes, too few for a charsmap");
    std::uint32_t trie_bytes = 0;
    for (int k = 3; k >= 0; --k) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<std::size_t>(k)]);
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4) {
      fail(map_at, "trie size " + std::to_string(trie_bytes) + " does not fit its " + std::to_string(blob.size()) + " bytes");
    }
    trie_.resize(trie_bytes / 4);
    for (std::size_t u = 0; u < trie_.size(); ++u) {
      std::uint32_t v = 0;
      for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(blob[4 + u * 4 + static_cast<std::size_t>(k)]);
      trie_[u] = v;
    }
    strings_ = blob.substr(4 + trie_bytes);
    if (find_invalid_utf8(strings_) != std::string::npos) fail(map_at, "its replacement strings are not valid UTF-8");
  }

  void normalize(NString& s) const override {
    if (s.size() == 0) return;
    NString out;
    out.s.reserve(s.size());
    out.align.reserve(s.size());
    std::string chunk;
    const std::vector<std::size_t> bounds = graphemes(s.s);
    for (std::size_t g = 0; g + 1 < bounds.size(); ++g) {
      const std::size_t b = bounds[g], e = bounds[g + 1];
      chunk = to_utf8(std::u32string_view(s.s).substr(b, e - b));
      if (chunk.size() < 6) {
        if (const char* norm = transform(chunk)) {
          put(s, b, e, norm, out);
          continue;
        }
      }
      for (std::size_t i = b; i < e; ++i) {
        chunk = to_utf8(std::u32string_view(&s.s[i], 1));
        if (const char* norm = transform(chunk)) {
          put(s, i, i + 1, norm, out);
        } else {
          out.s.push_back(s.s[i]);
          out.align.push_back(s.align[i]);
        }
      }
    }
    s = std::move(out);
  }

 private:
  // The replacement of the shortest key `chunk` starts with, or nullptr (the crate's transform()).
  const char* transform(const std::string& chunk) const {
    auto unit = [&](std::size_t pos) {
      if (pos >= trie_.size()) throw InputError(where_, "the trie points outside itself (a corrupt charsmap)");
      return trie_[pos];
    };
    auto offset = [](std::uint32_t u) { return static_cast<std::size_t>((u >> 10) << ((u & (1u << 9)) >> 6)); };
    std::size_t pos = offset(unit(0));
    for (unsigned char c : chunk) {
      if (c == 0) break;
      pos ^= c;
      const std::uint32_t u = unit(pos);
      if ((u & ((1u << 31) | 0xFFu)) != c) return nullptr;
      pos ^= offset(u);
      if ((u >> 8) & 1u) {
        const std::size_t at = unit(pos) & ((1u << 31) - 1);
        if (at >= strings_.size()) throw InputError(where_, "a replacement points outside the strings (a corrupt charsmap)");
        return strings_.c_str() + at;  // strings_ holds its NULs; c_str() ends the last one
      }
    }
    return nullptr;
  }

  // Characters [b, e) of `s` become `norm`: one to one when the counts agree, else every new
  // character spans all the old ones (offsets then cover the whole rewritten grapheme).
  static void put(const NString& s, std::size_t b, std::size_t e, const char* norm, NString& out) {
    const NString n = nstring_from_utf8(std::string_view(norm, std::strlen(norm)));
    for (std::size_t k = 0; k < n.size(); ++k) {
      out.s.push_back(n.s[k]);
      out.align.push_back(n.size() == e - b ? s.align[b + k] : std::pair{s.align[b].first, s.align[e - 1].second});
    }
  }

  // Extended grapheme cluster boundaries of `s` (code point indices, 0 and s.size() included), by ICU.
  static std::vector<std::size_t> graphemes(const std::u32string& s) {
    const auto u = icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.data()), static_cast<int32_t>(s.size()));
    thread_local std::unique_ptr<icu::BreakIterator> it = [] {
      UErrorCode st = U_ZERO_ERROR;
      std::unique_ptr<icu::BreakIterator> b(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), st));
      if (U_FAILURE(st)) b.reset();
      return b;
    }();
    std::vector<std::size_t> out{0};
    if (!it) throw std::runtime_error("ICU cannot create a grapheme break iterator");
    it->setText(u);
    std::size_t cp = 0;
    int32_t unit = 0;
    for (int32_t next = it->next(); next != icu::BreakIterator::DONE; next = it->next()) {
      while (unit < next) {
        unit += U16_IS_LEAD(u.charAt(unit)) && unit + 1 < u.length() ? 2 : 1;
        ++cp;
      }
      out.push_back(cp);
    }
    if (out.back() != s.size()) out.push_back(s.size());
    return out;
  }

  std::string where_;
  std::vector<std::uint32_t> trie_;
  std::string strings_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(NString& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

template <IcuNormalizer::Form F>
std::unique_ptr<Normalizer> make_icu(const json&, const JsonPath&, const BuildContext&) {
  return std::make_unique<IcuNormalizer>(F);
}

}  // namespace

const std::vector<Registration<Normalizer>>& normalizer_table() {
  static const std::vector<Registration<Normalizer>> table = {
      {"NFC", make_icu<IcuNormalizer::NFC>},
      {"NFD", make_icu<IcuNormalizer::NFD>},
      {"NFKC", make_icu<IcuNormalizer::NFKC>},
      {"NFKD", make_icu<IcuNormalizer::NFKD>},
      {"Lowercase", [](const json&, const JsonPath&, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Lowercase>();
       }},
      {"StripAccents", [](const json&, const JsonPath&, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<StripAccents>();
       }},
      {"Strip", [](const json& j, const JsonPath& at, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Strip>(get_bool(j, at, "strip_left", true), get_bool(j, at, "strip_right", true));
       }},
      {"Replace", [](const json& j, const JsonPath& at, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Replace>(Pattern::from_json(get_required(j, at, "pattern"), at / "pattern"),
                                          nstring_from_utf8(get_string(j, at, "content", "")).s);
       }},
      {"Prepend", [](const json& j, const JsonPath& at, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Prepend>(nstring_from_utf8(get_string(j, at, "prepend", "")).s);
       }},
      {"BertNormalizer", [](const json& j, const JsonPath& at, const BuildContext&) -> std::unique_ptr<Normalizer> {
         const bool lower = get_bool(j, at, "lowercase", true);
         // strip_accents: null means "as lowercase", as in BERT's BasicTokenizer.
         return std::make_unique<BertNormalizer>(get_bool(j, at, "clean_text", true),
                                                 get_bool(j, at, "handle_chinese_chars", true),
                                                 get_bool(j, at, "strip_accents", lower), lower);
       }},
      {"Precompiled", [](const json& j, const JsonPath& at, const BuildContext&) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Precompiled>(j, at);
       }},
      {"Sequence", [](const json& j, const JsonPath& at, const BuildContext& ctx) -> std::unique_ptr<Normalizer> {
         return std::make_unique<Sequence>(sequence_parts<Normalizer>(j, at, "normalizers", ctx, make_normalizer));
       }},
  };
  return table;
}

}  // namespace evalrun::hf
