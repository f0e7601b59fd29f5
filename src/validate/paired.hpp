// Two runs scored right/wrong on the same documents (multiple_choice's acc / acc_norm, generate_until's
// exact match per filter): the accuracy delta and whether it is more than chance, by McNemar's exact
// test on the documents only one run got right.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace evalrun {

// Two-sided: b documents right in the reference only, c in the candidate only;
// p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2). 1 when b + c = 0.
double mcnemar_exact_p(std::size_t b, std::size_t c);

struct PairedAccuracy {
  std::size_t n = 0;
  double ref = 0.0, cand = 0.0;      // shares right (0..1)
  std::size_t ref_only = 0, cand_only = 0;
  double delta = 0.0;                // cand - ref
  double p = 1.0;                    // McNemar's exact p
};
// `ref_right` / `cand_right`: 0/1 per document, same documents in the same order (InputError naming
// `where` otherwise).
PairedAccuracy paired_accuracy(const std::vector<std::int64_t>& ref_right, const std::vector<std::int64_t>& cand_right,
                               const std::string& where);

}  // namespace evalrun
