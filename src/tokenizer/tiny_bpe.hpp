// A tiny byte-level BPE tokenizer (RoBERTa layout) learned from a built-in English text, so tests
// and the demo (`evalrun make-model`) run without any downloaded files.
#pragma once

#include <string>
#include <string_view>

namespace evalrun {

// Learns byte-level BPE merges on the built-in corpus (GPT-2 pre-tokenization; each step merges the
// most frequent adjacent pair, ties broken by the pair's token strings, so the result is
// deterministic) until the vocabulary has `vocab_target` entries. Pairs that occur once are merged
// too once the frequent ones are used up, so any size up to the corpus' limit (1,346 entries, when
// every word of the corpus is one token) comes out exact; a larger target gets that limit, so
// read the size back (ByteLevelBPE::vocab_size()). Writes
// into `dir` (created if missing): vocab.json (<s>=0, <pad>=1, </s>=2, <unk>=3, the 256 byte
// symbols in byte order, the merged tokens, <mask> last), merges.txt ("#version: 0.2" first),
// special_tokens_map.json and tokenizer_config.json (RobertaTokenizer, model_max_length 512).
// vocab_target must be at least 261 (specials + bytes + <mask>).
void write_tiny_bpe_tokenizer(const std::string& dir, int vocab_target);

// The built-in training text (plain English prose with some punctuation and digits).
std::string_view tiny_bpe_corpus();

}  // namespace evalrun
