#include "common/errors.hpp"

namespace evalrun {

InputError::InputError(std::string where, const std::string& what)
    : std::runtime_error(where.empty() ? what : where + ": " + what), where_(std::move(where)), detail_(what) {}

}  // namespace evalrun
