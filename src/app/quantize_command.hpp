#pragma once

namespace evalrun {
// `evalrun quantize CONFIG.toml --out DIR`: direct INT8 quantization of the run's float checkpoint,
// written as an INT8 checkpoint (see README "INT8 W8A8").
int quantize_command(int argc, char** argv);
}  // namespace evalrun
