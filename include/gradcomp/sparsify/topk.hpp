#pragma once
// sparsify::topk: exact top-k by magnitude. Keeps the k = ceil(density * n) elements of a
// chunk with the largest |x| (compared as the bits of |x|, so NaN ranks above infinity),
// ties broken towards the lower index; indices travel ascending as u32.
// Contraction: ||x - topk(x)||^2 <= (1 - k/n) ||x||^2.
// Selection is a backend skeleton (cpu/topk_select.hpp: radix select, expected O(n)).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"

namespace gradcomp::sparsify {

// A fraction of a chunk to keep: in (0, 1] (NaN is not).
constexpr bool valid_density(double d) { return d > 0.0 && d <= 1.0; }

struct topk {
  using policy_kind = sparsifier_tag;
  struct config {
    double density = 0.01;  // fraction of each chunk's elements to keep, in (0, 1]
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() { return std::tuple{option{"density", &config::density}}; }
  };
  static constexpr std::uint8_t id = ids::sparsifier::topk;
  static constexpr bool is_dense = false;
  static constexpr selection kind = selection::exact_topk;

  static status validate(const config& c) {
    if (!valid_density(c.density)) return {errc::invalid_argument, "topk density must be in (0, 1]"};
    return {};
  }
  // An invalid density (rejected by validate) gives n, so size queries stay safe bounds.
  GRADCOMP_HD static std::size_t kept(const config& c, std::size_t n) {
    if (!(c.density > 0.0 && c.density < 1.0)) return n;
    const auto k = static_cast<std::size_t>(std::ceil(c.density * static_cast<double>(n)));
    return k < n ? k : n;
  }
};

}  // namespace gradcomp::sparsify
