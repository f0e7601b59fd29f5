// pytorch_model.bin: the zip archive torch.save writes (PyTorch >= 1.6), read as tensors only.
// The archive holds <prefix>/data.pkl, a pickle of the state dict, and one stored (uncompressed)
// entry <prefix>/data/<key> per storage. The pickle is interpreted by a small machine that knows only
// the opcodes and the few globals a state dict uses (collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter, the torch.*Storage types, and the type tag
// libtorch's torch::pickle_save puts on a dict): any other global
// is refused before anything is called, so a checkpoint can never run code (pickle's usual risk).
#pragma once

#include <string>

#include "io/safetensors.hpp"

namespace evalrun {

// One torch.save zip archive of a {name: tensor} dict, mapped read-only; each TensorView points into
// its storage's entry. Refused with an InputError naming the file (and the pickle byte or tensor):
// not a zip (the legacy pre-1.6 format), a compressed or missing entry, a big-endian archive, a pickle
// global outside the allow list, a top level that is not a dict of tensors, a tensor that is not
// contiguous or does not fit its storage.
class TorchBinFile : public TensorFile {
 public:
  explicit TorchBinFile(const std::string& path);
};

}  // namespace evalrun
