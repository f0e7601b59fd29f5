#pragma once

namespace evalrun {
// `evalrun inspect FILE.h5`: provenance, metrics, timing and the shape of every dataset.
int inspect_command(int argc, char** argv);
}  // namespace evalrun
