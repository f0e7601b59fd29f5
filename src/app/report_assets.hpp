// Files the HTML reports inline.
#pragma once

#include <string>

namespace evalrun {

// The text of plotly.min.js: from $EVALRUN_PLOTLY_JS when set, else from tools/report/node_modules
// (installed by scripts/setup.sh with `npm ci`). InputError naming `option` and the paths tried when
// it is missing.
std::string load_plotly_js(const std::string& option);

}  // namespace evalrun
