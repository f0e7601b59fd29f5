#include "validate/paired.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace evalrun {

double mcnemar_exact_p(std::size_t b, std::size_t c) {
  const std::size_t n = b + c, k = std::min(b, c);
  if (n == 0) return 1.0;
  // sum_{i <= k} C(n, i) / 2^n in logs (n may be thousands)
  double sum = 0.0;
  for (std::size_t i = 0; i <= k; ++i) {
    const double log_term = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                            std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0);
    sum += std::exp(log_term);
  }
  return std::min(1.0, 2.0 * sum);
}

PairedAccuracy paired_accuracy(const std::vector<std::int64_t>& ref_right, const std::vector<std::int64_t>& cand_right,
                               const std::string& where) {
  if (ref_right.size() != cand_right.size()) {
    throw InputError(where, std::to_string(cand_right.size()) + " documents where the reference has " +
                                std::to_string(ref_right.size()));
  }
  PairedAccuracy a;
  a.n = ref_right.size();
  std::size_t r = 0, c = 0;
  for (std::size_t i = 0; i < a.n; ++i) {
    r += ref_right[i] != 0;
    c += cand_right[i] != 0;
    a.ref_only += ref_right[i] != 0 && cand_right[i] == 0;
    a.cand_only += ref_right[i] == 0 && cand_right[i] != 0;
  }
  const double n = std::max<double>(1.0, static_cast<double>(a.n));
  a.ref = static_cast<double>(r) / n;
  a.cand = static_cast<double>(c) / n;
  a.delta = a.cand - a.ref;
  a.p = mcnemar_exact_p(a.ref_only, a.cand_only);
  return a;
}

}  // namespace evalrun
