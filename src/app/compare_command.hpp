#pragma once

namespace evalrun {
// `evalrun compare REFERENCE.h5 CANDIDATE.h5 [--thresholds T.toml] [--report R.md] [--json R.json]`:
// exit 0 when every threshold holds, 1 when one fails, 2 when the files cannot be compared.
int compare_command(int argc, char** argv);
}  // namespace evalrun
