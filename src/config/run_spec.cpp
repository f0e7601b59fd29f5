#include "config/run_spec.hpp"

namespace evalrun {

// The spellings here are the config file's values (config.cpp parses the same words).

const char* to_string(DType d) {
  switch (d) {
    case DType::fp32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
  }
  return "?";
}

const char* to_string(Device d) {
  switch (d) {
    case Device::cpu:
      return "cpu";
    case Device::cuda:
      return "cuda";
    case Device::aiu:
      return "aiu";
  }
  return "?";
}

const char* to_string(LogitsMode m) {
  switch (m) {
    case LogitsMode::none:
      return "none";
    case LogitsMode::topk:
      return "topk";
    case LogitsMode::full:
      return "full";
    case LogitsMode::logprobs16:
      return "logprobs16";
  }
  return "?";
}

}  // namespace evalrun
