#pragma once
// sparsify::row_topk (AccTFM token-level top-k): a chunk is seen as rows of `cols` elements
// (tokens x hidden; a last, shorter row holds what remains) and each row keeps its k largest
// |x| (compared as the bits of |x|, ties to the lower index). k is `k_per_row` when set,
// else ceil(density * cols); a row shorter than k keeps all of it. Indices travel as for
// sparsify::topk (ascending, in the smallest index encoding). Rows should not straddle
// chunks: pick a chunk size that is a multiple of the row size (partition::chunks).
// Contraction per row, hence overall: ||x - C(x)||^2 <= (1 - k/cols) ||x||^2.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "topk.hpp"

namespace gradcomp::sparsify {

struct row_topk {
  using policy_kind = sparsifier_tag;
  struct config {
    std::size_t cols = 0;        // elements per row (hidden size), > 0
    std::size_t k_per_row = 0;   // values kept per row; 0: ceil(density * cols)
    double density = 0.01;       // used when k_per_row is 0, in (0, 1]
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() {
      return std::tuple{option{"cols", &config::cols}, option{"k_per_row", &config::k_per_row},
                        option{"density", &config::density}};
    }
  };
  static constexpr std::uint8_t id = ids::sparsifier::row_topk;
  static constexpr bool is_dense = false;
  static constexpr selection kind = selection::row_topk;

  static status validate(const config& c) {
    if (c.cols == 0 || c.cols > 0xffffffffu) return {errc::invalid_argument, "row_topk needs 0 < cols < 2^32"};
    if (c.k_per_row == 0 && !valid_density(c.density))
      return {errc::invalid_argument, "row_topk density must be in (0, 1] (or set k_per_row)"};
    return {};
  }
  // Values kept per full row (0 only for an invalid config).
  GRADCOMP_HD static std::size_t per_row(const config& c) {
    if (c.cols == 0) return 0;
    if (c.k_per_row) return c.k_per_row < c.cols ? c.k_per_row : c.cols;
    return topk::kept({c.density}, c.cols);
  }
  // An invalid config (rejected by validate) gives n, so size queries stay safe bounds.
  GRADCOMP_HD static std::size_t kept(const config& c, std::size_t n) {
    if (c.cols == 0) return n;
    const std::size_t k = per_row(c), rest = n % c.cols;
    return n / c.cols * k + (rest < k ? rest : k);
  }
};

}  // namespace gradcomp::sparsify
