#pragma once
// Helpers of the count-sketch tests: a portable generator (splitmix64, the same numbers with
// every standard library), random kept sets, dyadic values whose sums are exact in fp32.

#include <gradcomp/sketch/count_sketch.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradcomp::test::sketch {

namespace gs = gradcomp::sketch;

class splitmix {
 public:
  explicit splitmix(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::uint64_t s_;
};

// Each position kept with probability `density`.
inline std::vector<std::uint32_t> random_bitmap(std::size_t count, double density, std::uint64_t seed) {
  splitmix r(seed);
  std::vector<std::uint32_t> bm(gs::bitmap_words(count), 0u);
  for (std::size_t j = 0; j < count; ++j)
    if (r.uniform() < density) bm[j / 32] |= 1u << (j % 32);
  return bm;
}

// k * 2^-12 with 0 < |k| <= 2^11: sums of up to 2^12 of them are exact in fp32.
inline std::vector<float> dyadic_values(std::size_t count, std::uint64_t seed) {
  splitmix r(seed);
  std::vector<float> v(count);
  for (auto& x : v) {
    const auto k = static_cast<int>(r.next() % 2048) + 1;
    x = static_cast<float>((r.next() & 1) ? -k : k) * 0x1.0p-12f;
  }
  return v;
}

// Values of every magnitude between 2^-20 and 2^4, either sign (sums round in fp32).
inline std::vector<float> wide_values(std::size_t count, std::uint64_t seed) {
  splitmix r(seed);
  std::vector<float> v(count);
  for (auto& x : v) {
    const double u = r.uniform();  // the draws in a fixed order (not within one expression)
    const double scale = static_cast<double>(1u << (r.next() % 25));
    const double m = (1.0 + u) * scale * 0x1.0p-20;
    x = static_cast<float>((r.next() & 1) ? -m : m);
  }
  return v;
}

// A geometry with about `cells_per_item` cells per set bit of `bitmap`.
inline gs::geometry geometry_for(std::size_t count, std::uint32_t block, std::span<const std::uint32_t> bitmap,
                                 double cells_per_item) {
  const double items = static_cast<double>(gs::bitmap_popcount(bitmap));
  auto rows = static_cast<std::uint32_t>(cells_per_item * items / block + 0.5);
  return *gs::make_geometry_rows(count, block, rows == 0 ? 1 : rows);
}

struct decoded {
  std::vector<float> out;
  std::vector<std::uint32_t> peeled;
  gs::peel_stats stats;
};

template <class Cell>
decoded decode_all(const gs::geometry& g, std::span<const std::uint32_t> bitmap, std::span<const Cell> cells,
                   gs::fallback fb = gs::fallback::median) {
  std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(bitmap)));
  decoded d{std::vector<float>(g.count, -7.0f), std::vector<std::uint32_t>(bitmap.size(), 0xdeadbeefu), {}};
  const auto st = gs::decode<Cell>(g, bitmap, cells, ws, d.out, {fb, d.peeled});
  if (st) d.stats = *st;
  return d;
}

template <class Cell>
std::vector<Cell> encode_all(const gs::geometry& g, std::span<const float> x, std::span<const std::uint32_t> bitmap,
                             std::span<const std::uint32_t> enter = {}) {
  std::vector<std::byte> ws(gs::encode_workspace_bytes<Cell>(g));
  std::vector<Cell> cells(g.cells());
  const status s = gs::encode<Cell>(g, x, bitmap, enter, ws, cells);
  if (!s) cells.clear();
  return cells;
}

inline bool test_bit(std::span<const std::uint32_t> bm, std::size_t j) { return gs::bitmap_test(bm.data(), j); }

}  // namespace gradcomp::test::sketch
