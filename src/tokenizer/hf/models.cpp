// tokenizer.json models: BPE, WordPiece, Unigram, WordLevel. A model turns one pre-tokenized piece into tokens.
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "common/errors.hpp"
#include "common/utf8.hpp"
#include "tokenizer/hf/pipeline.hpp"

namespace evalrun::hf {
namespace {

// The "vocab" object {token: id} shared by every model, token -> id and back. The token -> id side
// is an open-addressing table (linear probing, slots of a hash tag and an entry index): a lookup
// touches one slot and the key's bytes, where a node-based unordered_map chased three pointers
// through a 128k-entry vocabulary's nodes (a sixth of Llama 3's encoding time went there).
class Vocab {
 public:
  void load(const json& j, const JsonPath& at) {
    if (!j.is_object()) fail(at, "expected an object {token: id}");
    keys_.reserve(j.size());
    ids_.reserve(j.size());
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<std::int64_t>() < 0) {
        fail(at / it.key(), "expected a non-negative id, got " + it.value().dump());
      }
      const auto id = it.value().get<std::int64_t>();
      // The id tables are dense: a file may leave at most 2^20 ids unused (as ByteLevelBPE allows).
      if (id >= static_cast<std::int64_t>(j.size()) + (std::int64_t{1} << 20)) {
        fail(at / it.key(), "id " + std::to_string(id) + " is far past the vocabulary's " + std::to_string(j.size()) + " entries");
      }
      keys_.push_back(it.key());  // the keys of a JSON object are distinct
      ids_.push_back(id);
      if (static_cast<std::size_t>(id) >= to_token_.size()) to_token_.resize(static_cast<std::size_t>(id) + 1);
      to_token_[static_cast<std::size_t>(id)] = it.key();
      has_.resize(to_token_.size());
      has_[static_cast<std::size_t>(id)] = true;
    }
    std::size_t n = 16;
    while (n < 2 * keys_.size()) n *= 2;  // at most half full
    slots_.assign(n, Slot{0, -1});
    mask_ = n - 1;
    for (std::size_t e = 0; e < keys_.size(); ++e) {
      const std::size_t h = hash(keys_[e]);
      std::size_t i = h & mask_;
      while (slots_[i].entry >= 0) i = (i + 1) & mask_;
      slots_[i] = {tag(h), static_cast<std::int32_t>(e)};
    }
  }
  std::int64_t id(std::string_view t) const {
    if (slots_.empty()) return -1;
    const std::size_t h = hash(t);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.entry < 0) return -1;
      if (s.tag == tag(h) && keys_[static_cast<std::size_t>(s.entry)] == t) return ids_[static_cast<std::size_t>(s.entry)];
    }
  }
  const std::string* token(std::int64_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= to_token_.size() || !has_[static_cast<std::size_t>(id)]) return nullptr;
    return &to_token_[static_cast<std::size_t>(id)];
  }
  std::int64_t size() const { return static_cast<std::int64_t>(keys_.size()); }

 private:
  struct Slot {
    std::uint32_t tag;    // high bits of the key's hash: most mismatches end here
    std::int32_t entry;   // index into keys_ / ids_, -1 = empty
  };
  static std::size_t hash(std::string_view t) { return std::hash<std::string_view>{}(t); }
  static std::uint32_t tag(std::size_t h) { return static_cast<std::uint32_t>(h >> 32); }

  std::vector<std::string> keys_;
  std::vector<std::int64_t> ids_;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::vector<std::string> to_token_;
  std::vector<bool> has_;
};

// An optional token that must be in the vocabulary (unk_token): its id, or -1 when not set.
std::int64_t optional_token_id(const json& j, const JsonPath& at, const char* key, const Vocab& v, const std::string& fallback) {
  const std::string t = get_string(j, at, key, fallback);
  if (t.empty()) return -1;
  const std::int64_t id = v.id(t);
  if (id < 0) fail(at / key, json(t).dump() + " is not in the model's vocab");
  return id;
}

class Bpe : public Model {
 public:
  Bpe(const json& j, const JsonPath& at) {
    vocab_.load(get_required(j, at, "vocab"), at / "vocab");
    if (j.contains("dropout") && !j["dropout"].is_null() && !(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0)) {
      fail(at / "dropout", j["dropout"].dump() + " is not supported (BPE dropout is for training; supported: null)");
    }
    prefix_ = get_string(j, at, "continuing_subword_prefix", "");
    suffix_ = get_string(j, at, "end_of_word_suffix", "");
    fuse_unk_ = get_bool(j, at, "fuse_unk", false);
    byte_fallback_ = get_bool(j, at, "byte_fallback", false);
    ignore_merges_ = get_bool(j, at, "ignore_merges", false);
    unk_ = optional_token_id(j, at, "unk_token", vocab_, "");
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        byte_ids_[b] = vocab_.id(name);
      }
    }
    const json& merges = get_required(j, at, "merges");
    if (!merges.is_array()) fail(at / "merges", "expected a list");
    merges_.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const json& m = merges[r];
      const JsonPath here = (at / "merges")[r];
      std::string a, b;
      // Two spellings: "a b" (older files) and ["a", "b"] (tokenizers >= 0.20, which allows spaces).
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) fail(here, "expected \"a b\", got " + m.dump());
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        fail(here, "expected \"a b\" or [\"a\", \"b\"], got " + m.dump());
      }
      const std::int64_t ia = vocab_.id(a), ib = vocab_.id(b);
      if (ia < 0 || ib < 0) fail(here, json(ia < 0 ? a : b).dump() + " is not in the model's vocab");
      std::string joined = a + (b.compare(0, prefix_.size(), prefix_) == 0 ? b.substr(prefix_.size()) : b);
      const std::int64_t ij = vocab_.id(joined);
      if (ij < 0) fail(here, "the merged token " + json(joined).dump() + " is not in the model's vocab");
      merges_.try_emplace(key(ia, ib), static_cast<std::int64_t>(r), ij);
    }
  }

  void tokenize(const std::u32string& piece, std::vector<ModelToken>& out) const override {
    const std::size_t n = piece.size();
    if (n == 0) return;
    // The piece as UTF-8 (the vocabulary's and the cache's key: a quarter of the bytes to hash of the
    // code points), in a buffer each thread keeps.
    thread_local std::string word;
    word.clear();
    for (char32_t c : piece) append_utf8(word, c);
    if (ignore_merges_) {
      // Llama 3: a piece that is itself a token is taken whole, whatever the merges would make of it
      // (before the cache, as the crate checks it: most words of a text are such tokens).
      const std::int64_t id = suffix_.empty() ? vocab_.id(word) : vocab_.id(word + suffix_);
      if (id >= 0) {
        out.push_back({id, 0, n});
        return;
      }
    }
    // A piece's tokens depend on the piece alone: the crate keeps the first 10,000 distinct pieces
    // shorter than 256 characters in a cache, and so does this (most words of a text repeat).
    const bool cacheable = n < kCacheMaxLength;
    if (cacheable) {
      const std::lock_guard<std::mutex> lock(cache_mutex_);
      if (const auto hit = cache_.find(word); hit != cache_.end()) {
        out.insert(out.end(), hit->second.begin(), hit->second.end());
        return;
      }
    }
    const std::size_t first = out.size();
    tokenize_uncached(piece, out);
    if (cacheable) {
      const std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() < kCacheCapacity) cache_.emplace(word, std::vector<ModelToken>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
  }

  std::int64_t token_to_id(const std::string& t) const override { return vocab_.id(t); }
  const std::string* id_to_token(std::int64_t id) const override { return vocab_.token(id); }
  std::int64_t vocab_size() const override { return vocab_.size(); }

 private:
  static constexpr std::size_t kCacheCapacity = 10000, kCacheMaxLength = 256;

  void tokenize_uncached(const std::u32string& piece, std::vector<ModelToken>& out) const {
    // (ignore_merges: tokenize() took the pieces that are tokens already.)
    const std::size_t n = piece.size();
    std::vector<Sym> syms;
    syms.reserve(n);
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
      s.clear();
      if (i > 0) s = prefix_;
      s += to_utf8(std::u32string_view(&piece[i], 1));
      if (i + 1 == n) s += suffix_;
      const std::int64_t id = vocab_.id(s);
      if (id >= 0) {
        syms.push_back({id, i, i + 1});
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char c : s) all = all && byte_ids_[c] >= 0;
        if (all) {
          for (unsigned char c : s) syms.push_back({byte_ids_[c], i, i + 1, true});
          continue;
        }
      }
      if (unk_ >= 0) {
        if (fuse_unk_ && !syms.empty() && syms.back().id == unk_) syms.back().end = i + 1;
        else syms.push_back({unk_, i, i + 1});
      }
      // No unk token: the character is dropped, as the crate does.
    }
    merge(syms);
    for (const Sym& x : syms) {
      if (x.alive) out.push_back({x.id, x.start, x.end});
    }
  }

  struct Sym {
    std::int64_t id;
    std::size_t start, end;
    bool byte = false;  // from byte fallback: never merged
    bool alive = true;
    int prev = -1, next = -1;
  };
  static std::uint64_t key(std::int64_t a, std::int64_t b) {
    return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
  }

  // Repeatedly applies the lowest-ranked merge (leftmost first among equals), as the crate's
  // priority-queue BPE: O(n log n) in the piece length.
  void merge(std::vector<Sym>& syms) const {
    const int n = static_cast<int>(syms.size());
    for (int i = 0; i < n; ++i) {
      syms[static_cast<std::size_t>(i)].prev = i - 1;
      syms[static_cast<std::size_t>(i)].next = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      std::int64_t rank;
      int pos;
      std::int64_t id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> q;
    auto consider = [&](int pos) {
      if (pos < 0) return;
      const Sym& a = syms[static_cast<std::size_t>(pos)];
      if (a.next < 0) return;
      const Sym& b = syms[static_cast<std::size_t>(a.next)];
      auto it = merges_.find(key(a.id, b.id));
      if (it != merges_.end()) q.push({it->second.first, pos, it->second.second});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      Sym& a = syms[static_cast<std::size_t>(c.pos)];
      if (!a.alive || a.next < 0) continue;
      Sym& b = syms[static_cast<std::size_t>(a.next)];
      auto it = merges_.find(key(a.id, b.id));
      if (it == merges_.end() || it->second.first != c.rank) continue;  // stale entry
      a.id = c.id;
      a.end = b.end;
      b.alive = false;
      a.next = b.next;
      if (a.next >= 0) syms[static_cast<std::size_t>(a.next)].prev = c.pos;
      consider(a.prev);
      consider(c.pos);
    }
  }

  Vocab vocab_;
  std::unordered_map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> merges_;  // (a, b) -> (rank, merged id)
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::int64_t unk_ = -1;
  std::int64_t byte_ids_[256] = {};
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<ModelToken>> cache_;  // key: the piece in UTF-8
};

// BERT's WordPiece: greedy longest match first, continuation pieces prefixed ("##"); a word with a
// part the vocabulary lacks, or longer than max_input_chars_per_word, is one unk token.
class WordPiece : public Model {
 public:
  WordPiece(const json& j, const JsonPath& at) {
    vocab_.load(get_required(j, at, "vocab"), at / "vocab");
    prefix_ = get_string(j, at, "continuing_subword_prefix", "##");
    max_chars_ = static_cast<std::size_t>(get_int(j, at, "max_input_chars_per_word", 100));
    unk_ = optional_token_id(j, at, "unk_token", vocab_, "[UNK]");
  }
  void tokenize(const std::u32string& piece, std::vector<ModelToken>& out) const override {
    const std::size_t n = piece.size();
    if (n == 0) return;
    std::vector<ModelToken> got;
    bool bad = n > max_chars_;
    for (std::size_t start = 0; !bad && start < n;) {
      std::int64_t found = -1;
      std::size_t end = n;
      for (; end > start; --end) {
        const std::string s = (start > 0 ? prefix_ : std::string()) + to_utf8(piece.substr(start, end - start));
        found = vocab_.id(s);
        if (found >= 0) break;
      }
      if (found < 0) bad = true;
      else got.push_back({found, start, end});
      start = end;
    }
    if (bad) {
      if (unk_ >= 0) out.push_back({unk_, 0, n});
      return;
    }
    out.insert(out.end(), got.begin(), got.end());
  }
  std::int64_t token_to_id(const std::string& t) const override { return vocab_.id(t); }
  const std::string* id_to_token(std::int64_t id) const override { return vocab_.token(id); }
  std::int64_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  std::string prefix_;
  std::size_t max_chars_ = 100;
  std::int64_t unk_ = -1;
};

// Unigram (sentencepiece's model, as the crate runs it): the best-scoring split of the piece into
// vocabulary entries (Viterbi over byte positions at character starts, each entry's log-probability
// score), a character no entry starts with costing the lowest score - 10 as unk; runs of unk fused
// into one token; with byte_fallback an unk run the vocabulary lacks becomes its <0xXX> byte tokens.
// Ties keep the first path found (the earlier start, then the shorter entry), as the crate does.
class Unigram : public Model {
 public:
  Unigram(const json& j, const JsonPath& at) : where_(at.str()) {
    const json& vocab = get_required(j, at, "vocab");
    if (!vocab.is_array() || vocab.empty()) fail(at / "vocab", "expected a non-empty list of [piece, score]");
    pieces_.reserve(vocab.size());
    scores_.reserve(vocab.size());
    double min_score = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const json& e = vocab[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        fail((at / "vocab")[i], "expected [piece, score], got " + e.dump());
      }
      pieces_.push_back(e[0].get<std::string>());
      scores_.push_back(e[1].get<double>());
      min_score = std::min(min_score, scores_.back());
      // A piece listed twice resolves to its last id, as the crate's map does.
      to_id_[pieces_.back()] = static_cast<std::int64_t>(i);
    }
    unk_score_ = min_score - 10.0;
    for (const auto& [piece, id] : to_id_) trie_add(piece, id);
    unk_ = get_int(j, at, "unk_id", -1);
    if (unk_ >= static_cast<std::int64_t>(pieces_.size()) || (j.contains("unk_id") && !j["unk_id"].is_null() && unk_ < 0)) {
      fail(at / "unk_id", std::to_string(unk_) + " is not an index of the vocab's " + std::to_string(pieces_.size()) + " entries");
    }
    byte_fallback_ = get_bool(j, at, "byte_fallback", false);
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto it = to_id_.find(name);
        byte_ids_[b] = it == to_id_.end() ? -1 : it->second;
      }
    }
  }

  void tokenize(const std::u32string& piece, std::vector<ModelToken>& out) const override {
    if (piece.empty()) return;
    // Bytes of the piece and the code point each byte belongs to (offsets are in code points).
    std::string bytes;
    std::vector<std::size_t> cp_at;  // per byte, plus one past the end
    for (std::size_t i = 0; i < piece.size(); ++i) {
      const std::size_t before = bytes.size();
      bytes += to_utf8(std::u32string_view(&piece[i], 1));
      cp_at.insert(cp_at.end(), bytes.size() - before, i);
    }
    cp_at.push_back(piece.size());
    const std::size_t n = bytes.size();
    struct Best {
      double score = 0;
      std::size_t start = 0;
      std::int64_t id = -1;  // -1: not reached
    };
    std::vector<Best> best(n + 1);
    best[0].id = 0;
    for (std::size_t start = 0; start < n;) {
      const std::size_t char_end = start + utf8_length(static_cast<unsigned char>(bytes[start]), n - start);
      const double here = best[start].score;
      bool single = false;
      auto offer = [&](std::size_t end, std::int64_t id, double score) {
        Best& b = best[end];
        if (b.id < 0 || here + score > b.score) b = {here + score, start, id};
      };
      int node = 0;
      for (std::size_t k = start; k < n; ++k) {
        auto it = children_.find(child_key(node, static_cast<unsigned char>(bytes[k])));
        if (it == children_.end()) break;
        node = it->second;
        const std::int64_t id = node_id_[static_cast<std::size_t>(node)];
        if (id < 0) continue;
        offer(k + 1, id, scores_[static_cast<std::size_t>(id)]);
        single = single || k + 1 == char_end;
      }
      if (!single) {
        if (unk_ < 0) throw InputError(where_ + ".unk_id", "is null, and the text has a character no piece covers");
        offer(char_end, unk_, unk_score_);
      }
      start = char_end;
    }
    // Back from the end; unk runs fused into one token.
    std::vector<std::pair<std::size_t, std::size_t>> spans;  // byte spans, last first
    std::vector<bool> unk;
    for (std::size_t end = n; end > 0;) {
      const Best& b = best[end];
      const bool is_unk = b.id == unk_;
      if (is_unk && !unk.empty() && unk.back()) spans.back().first = b.start;
      else {
        spans.emplace_back(b.start, end);
        unk.push_back(is_unk);
      }
      end = b.start;
    }
    for (std::size_t k = spans.size(); k-- > 0;) {
      const auto [b, e] = spans[k];
      const std::size_t cb = cp_at[b], ce = cp_at[e];
      auto it = to_id_.find(bytes.substr(b, e - b));
      if (it != to_id_.end()) {
        out.push_back({it->second, cb, ce});
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (std::size_t x = b; x < e; ++x) all = all && byte_ids_[static_cast<unsigned char>(bytes[x])] >= 0;
        if (all) {
          for (std::size_t x = b; x < e; ++x) out.push_back({byte_ids_[static_cast<unsigned char>(bytes[x])], cb, ce});
          continue;
        }
      }
      out.push_back({unk_, cb, ce});
    }
  }

  std::int64_t token_to_id(const std::string& t) const override {
    auto it = to_id_.find(t);
    return it == to_id_.end() ? -1 : it->second;
  }
  const std::string* id_to_token(std::int64_t id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < pieces_.size() ? &pieces_[static_cast<std::size_t>(id)] : nullptr;
  }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(pieces_.size()); }

 private:
  static std::uint64_t child_key(int node, unsigned char c) { return (static_cast<std::uint64_t>(node) << 8) | c; }
  // The length of the UTF-8 character starting with lead byte c (the text is valid UTF-8).
  static std::size_t utf8_length(unsigned char c, std::size_t left) {
    const std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return std::min(len, left);
  }
  void trie_add(const std::string& piece, std::int64_t id) {
    if (piece.empty()) return;
    int node = 0;
    for (unsigned char c : piece) {
      auto [it, fresh] = children_.try_emplace(child_key(node, c), static_cast<int>(node_id_.size()));
      if (fresh) node_id_.push_back(-1);
      node = it->second;
    }
    node_id_[static_cast<std::size_t>(node)] = id;
  }

  std::string where_;
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, std::int64_t> to_id_;
  // A byte trie of the pieces: (node, byte) -> node; node_id_[node] = the piece ending there, or -1.
  std::unordered_map<std::uint64_t, int> children_;
  std::vector<std::int64_t> node_id_{-1};
  double unk_score_ = 0;
  std::int64_t unk_ = -1;
  bool byte_fallback_ = false;
  std::int64_t byte_ids_[256] = {};
};

// A piece is a token or unk.
class WordLevel : public Model {
 public:
  WordLevel(const json& j, const JsonPath& at) {
    vocab_.load(get_required(j, at, "vocab"), at / "vocab");
    unk_ = optional_token_id(j, at, "unk_token", vocab_, "");
  }
  void tokenize(const std::u32string& piece, std::vector<ModelToken>& out) const override {
    if (piece.empty()) return;
    const std::int64_t id = vocab_.id(to_utf8(piece));
    if (id >= 0) out.push_back({id, 0, piece.size()});
    else if (unk_ >= 0) out.push_back({unk_, 0, piece.size()});
  }
  std::int64_t token_to_id(const std::string& t) const override { return vocab_.id(t); }
  const std::string* id_to_token(std::int64_t id) const override { return vocab_.token(id); }
  std::int64_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  std::int64_t unk_ = -1;
};

template <class M>
std::unique_ptr<Model> make(const json& j, const JsonPath& at, const BuildContext&) {
  return std::make_unique<M>(j, at);
}

}  // namespace

const std::vector<Registration<Model>>& model_table() {
  static const std::vector<Registration<Model>> table = {
      {"BPE", make<Bpe>},
      {"WordPiece", make<WordPiece>},
      {"Unigram", make<Unigram>},
      {"WordLevel", make<WordLevel>},
  };
  return table;
}

}  // namespace evalrun::hf
