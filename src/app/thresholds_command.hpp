// `evalrun thresholds REF.h5 RUN.h5...`: derives compare thresholds from the spread of several runs
// against one reference (a percentile of each metric, times a safety margin) and writes a TOML file
// that `evalrun compare --thresholds` accepts.
#pragma once

namespace evalrun {

int thresholds_command(int argc, char** argv);

}  // namespace evalrun
