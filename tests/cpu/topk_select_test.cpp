// The CPU top-k skeleton on its own: both of its paths give the exact answer.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/cpu/topk_select.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "support/random.hpp"
#include "support/reference.hpp"

using namespace gradcomp;
using test::keys_of;
using test::reference_topk;

namespace {

struct outcome {
  std::vector<std::uint32_t> indices;
  bool fallback;
  std::size_t scanned;
};

outcome run(const std::vector<std::uint32_t>& keys, std::size_t k, bool misleading_sample = false) {
  const std::size_t n = keys.size();
  std::vector<std::uint64_t> ws(cpu::detail::topk_selector::workspace_bytes(n) / 8 + 1);
  std::vector<std::uint32_t> out(k + 1);
  cpu::detail::topk_selector sel(std::as_writable_bytes(std::span(ws)), n, k);
  std::size_t scanned = 0, expect_next = 0;
  bool in_order = true, ahead_ok = true;
  std::size_t ahead_calls = 0;
  const auto key = [&](std::size_t i) { return keys[i]; };
  sel.select(
      [&](std::size_t i) { return misleading_sample ? 0u : keys[i]; },
      [&](std::size_t i) {
        in_order &= i == expect_next++;
        ++scanned;
        return keys[i];
      },
      key, out.data(),
      [&](std::size_t i, std::size_t m) {  // the prefetch hook names only elements still to come
        ahead_ok &= i >= expect_next && m > 0 && i + m <= n;
        ++ahead_calls;
      });
  CHECK(in_order);
  CHECK(ahead_ok);
  if (n >= 4096) CHECK(ahead_calls > 0);
  out.resize(k);
  return {out, sel.used_fallback(), scanned};
}

}  // namespace

TEST_CASE("sampled bracket path on typical data, exact, each element scanned once in order") {
  const auto keys = keys_of(test::heavy_tailed(1 << 20, 21));
  for (std::size_t k : {1u, 100u, 1000u, 10486u, 104858u, 524288u}) {
    CAPTURE(k);
    const auto r = run(keys, k);
    CHECK(!r.fallback);
    CHECK(r.scanned == keys.size());
    CHECK(r.indices == reference_topk(keys, k));
  }
}

TEST_CASE("radix fallback when the sample misleads or ties crowd the bracket") {
  std::vector<std::uint32_t> equal(200000, 0x3f800000u);
  auto r = run(equal, 5000);
  CHECK(r.fallback);
  CHECK(r.indices == reference_topk(equal, 5000));

  const std::size_t n = 200000, s = cpu::detail::topk_selector::sample_size;
  auto fooled = keys_of(test::heavy_tailed(n, 22, 1e-3f));
  for (std::size_t j = 0; j < s; ++j) fooled[j * n / s] = 0x3f800000u + static_cast<std::uint32_t>(j);
  for (std::size_t k : {100u, 40000u}) {
    r = run(fooled, k);
    CHECK(r.indices == reference_topk(fooled, k));
  }
  CHECK(run(fooled, 100).fallback);
}

TEST_CASE("k = 0 and k = n still scan every element") {
  const auto keys = keys_of(test::heavy_tailed(1000, 23));
  CHECK(run(keys, 0).scanned == 1000);
  const auto all = run(keys, 1000);
  CHECK(all.scanned == 1000);
  CHECK(all.indices == reference_topk(keys, 1000));
}

TEST_CASE("compact: small inputs take 20 bytes per element, exact even when the sample misleads") {
  using sel = cpu::detail::topk_selector;
  CHECK(sel::workspace_bytes(1000) == 20000);
  CHECK(sel::workspace_bytes(sel::compact_max) == 20 * sel::compact_max);
  CHECK(sel::workspace_bytes(sel::compact_max + 1) > 256 * 1024);  // the histogram from here on
  for (std::size_t n : {std::size_t{3}, std::size_t{777}, sel::compact_max}) {
    const auto keys = keys_of(test::heavy_tailed(n, 24));
    const std::vector<std::uint32_t> equal(n, 0x3f800000u);
    for (std::size_t k : {std::size_t{1}, n / 3, n - 1}) {
      CAPTURE(n);
      CAPTURE(k);
      for (const auto* in : {&keys, &equal}) {
        const auto r = run(*in, k);
        CHECK(!r.fallback);
        CHECK(r.indices == reference_topk(*in, k));
      }
      const auto fooled = run(keys, k, true);  // sample keys that are not the scanned ones
      CHECK(fooled.fallback);
      CHECK(fooled.indices == reference_topk(keys, k));
    }
  }
}
