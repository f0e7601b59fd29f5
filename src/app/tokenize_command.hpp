#pragma once

namespace evalrun {
// `evalrun tokenize --tokenizer DIR [--pair] [--offsets] [--decode] FILE.jsonl|-`: one JSON line of
// ids (and offsets) per input line, through the directory's tokenizer.json pipeline, for finding why
// two stacks tokenize a text differently; --decode turns lines of ids back into text.
int tokenize_command(int argc, char** argv);
}  // namespace evalrun
