// The row-wise top-k skeleton on its own: each row keeps its k largest keys, ties to the
// lower index, against a sort-based reference, on every ISA version.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/cpu/row_topk.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
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

// Selects with every ISA version (the one run_best picks, and the plain loops with the
// AVX-512 path off); checks the in-order scan, the values and the reference.
void check_selection(const std::vector<std::uint32_t>& keys, std::size_t cols, std::size_t k) {
  CAPTURE(cols);
  CAPTURE(k);
  const auto expected = reference(keys, cols, k);
  const auto limit = cpu::isa_limit().load();
  for (const cpu::isa v : {cpu::isa::baseline, cpu::isa::avx2, cpu::isa::avx512}) {
    CAPTURE(static_cast<int>(v));
    cpu::isa_limit() = v;
    std::vector<std::uint64_t> ws(cpu::detail::row_topk_selector::workspace_bytes(cols) / 8);
    std::vector<std::uint32_t> out(keys.size() + cpu::detail::row_topk_selector::out_slack);
    std::vector<float> values(keys.size());
    cpu::detail::row_topk_selector sel(std::as_writable_bytes(std::span(ws)), keys.size(), cols, k);
    std::size_t next = 0;
    bool in_order = true;
    const auto value_at = [&](std::size_t i) { return static_cast<float>(i) + 0.5f; };
    const std::size_t kept = sel.select(
        [&](std::size_t i) {
          in_order &= i == next++;
          return keys[i];
        },
        out.data(), value_at, values.data());
    out.resize(kept);
    values.resize(kept);
    CHECK(in_order);
    CHECK(next == keys.size());
    CHECK(out == expected);
    bool values_match = true;
    for (std::size_t m = 0; m < kept; ++m) values_match &= values[m] == value_at(out[m]);
    CHECK(values_match);
  }
  cpu::isa_limit() = limit;
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
        std::vector<std::uint32_t> out(data->size() + cpu::detail::row_topk_selector::out_slack);
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

TEST_CASE("row top-k: property test, every ISA, ties, NaN and inf keys, flat rows, k from 1 to cols") {
  std::mt19937_64 gen(33);
  std::normal_distribution<float> normal;
  std::chi_squared_distribution<float> chi2(3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 120; ++trial) {
    const std::size_t cols = trial % 4 == 0 ? 4096 : 33 + gen() % 1500;
    const std::size_t rows = 1 + gen() % 9, n = rows * cols - (trial % 3 == 0 ? gen() % cols : 0);
    const int kind = trial % 8;
    CAPTURE(kind);
    std::vector<std::uint32_t> keys(n);
    float scale = 1.0f;
    for (std::size_t i = 0; i < n; ++i) {
      if (i % cols == 0) scale = std::exp(2.0f * normal(gen));  // rows at scales far apart
      const float t = scale * normal(gen) / std::sqrt(chi2(gen) / 3.0f + 1e-12f);
      switch (kind) {
        case 0: keys[i] = abs_key(t); break;                                                // activations
        case 1: keys[i] = static_cast<std::uint32_t>(gen() % 3); break;                     // many ties
        case 2: keys[i] = (i / cols) % 2 ? 0u : abs_key(std::round(4 * t)); break;          // flat and rounded rows
        case 3: keys[i] = static_cast<std::uint32_t>(gen()); break;                         // any u32
        case 4: keys[i] = abs_key(gen() % 5 == 0 ? (gen() % 2 ? nan : -inf) : t); break;    // NaN and inf
        case 5: keys[i] = gen() % 2 ? 0xffffffffu : static_cast<std::uint32_t>(gen() % 4); break;  // the top key
        case 6: keys[i] = abs_key(std::ldexp(t, static_cast<int>(gen() % 200) - 100)); break;     // wide range
        default: keys[i] = abs_key(static_cast<float>(static_cast<int>(i % cols) % 7)); break;   // periodic ties
      }
    }
    const std::size_t ks[] = {1, 33, std::max<std::size_t>(33, cols / 8), cols / 2, cols - 1, cols,
                              1 + static_cast<std::size_t>(gen() % cols)};
    for (std::size_t k : ks) check_selection(keys, cols, k);
  }
}
