// The row-wise top-k skeleton on its own: each row keeps its k largest keys, ties to the
// lower index, against a sort-based reference.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/cpu/row_topk.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "support/random.hpp"
#include "support/reference.hpp"

using namespace gradcomp;

namespace {

std::vector<std::uint32_t> reference(const std::vector<std::uint32_t>& keys, std::size_t cols, std::size_t k) {
  std::vector<std::uint32_t> out;
  for (std::size_t row = 0; row < keys.size(); row += cols) {
    const auto idx = test::reference_topk(keys, k, row, cols);
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

}  // namespace

TEST_CASE("row top-k equals a per-row sort, ties to the lower index") {
  const auto heavy = test::heavy_tailed(10007, 5);
  std::vector<std::uint32_t> keys(heavy.size());
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = abs_key(heavy[i]);
  std::vector<std::uint32_t> ties(5000);
  for (std::size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<std::uint32_t>(i * 7919 % 3);
  for (const auto* data : {&keys, &ties}) {
    for (std::size_t cols : {1u, 7u, 64u, 768u, 5000u, 20000u}) {
      for (std::size_t k : {0u, 1u, 3u, 10u, 32u, 33u, 768u}) {
        CAPTURE(cols);
        CAPTURE(k);
        std::vector<std::uint64_t> ws(cpu::detail::row_topk_selector::workspace_bytes(cols) / 8);
        std::vector<std::uint32_t> out(data->size());
        cpu::detail::row_topk_selector sel(std::as_writable_bytes(std::span(ws)), data->size(), cols, k);
        std::size_t next = 0;
        bool in_order = true;
        const std::size_t kept = sel.select(
            [&](std::size_t i) {
              in_order &= i == next++;
              return (*data)[i];
            },
            out.data());
        out.resize(kept);
        CHECK(in_order);
        CHECK(next == data->size());
        CHECK(out == reference(*data, cols, k));
      }
    }
  }
}
