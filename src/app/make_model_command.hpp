#pragma once

namespace evalrun {
// `evalrun make-model`: a deterministic random Hugging Face checkpoint plus tokenizer files.
int make_model_command(int argc, char** argv);
}  // namespace evalrun
