// Kept-position bitmaps: the 1-bit form (OR), the sum-safe packing (SUM), validation of
// received buffers, and the published defect (1-bit bitmaps summed as uint8 bytes).
#include <gradcomp/sketch/bitmap.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sketch/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::sketch;

TEST_CASE("sketch bitmap: build, test, popcount, tail bits") {
  for (std::size_t count : {0u, 1u, 31u, 32u, 33u, 1000u, 1003u}) {
    std::vector<std::uint32_t> bm(gs::bitmap_words(count));
    const auto keep = [](std::size_t j) { return j % 3 == 0 || j % 7 == 5; };
    REQUIRE(gs::build_bitmap(count, keep, std::span<std::uint32_t>(bm)).ok());
    std::size_t expect = 0;
    for (std::size_t j = 0; j < count; ++j) {
      CHECK(gs::bitmap_test(bm.data(), j) == keep(j));
      expect += keep(j) ? 1 : 0;
    }
    CHECK(gs::bitmap_popcount(bm) == expect);
    for (std::size_t w = 0; w < bm.size(); ++w) CHECK(bm[w] == gs::bitmap_word(keep, w, count));  // the device form
    CHECK(gs::check_bitmap(bm, count).ok());
    if (count % 32 != 0) {
      bm.back() |= 1u << 31;  // a position past count
      CHECK(gs::check_bitmap(bm, count) == errc::index_out_of_range);
    }
  }
  std::vector<std::uint32_t> bm(3);
  CHECK(gs::build_bitmap(100, [](std::size_t) { return true; }, std::span<std::uint32_t>(bm)) == errc::size_mismatch);
  CHECK(gs::check_bitmap(bm, 100) == errc::size_mismatch);
  std::vector<std::uint32_t> a{1u, 2u}, b{4u, 8u}, c{1u};
  REQUIRE(gs::bitmap_or(a, b).ok());
  CHECK(a == std::vector<std::uint32_t>{5u, 10u});
  CHECK(gs::bitmap_or(a, c) == errc::size_mismatch);
}

TEST_CASE("sketch bitmap: sum-safe field width and words") {
  struct row {
    std::uint32_t world, width, per_word;
  };
  for (const row r : {row{1, 1, 32}, row{2, 2, 16}, row{3, 2, 16}, row{4, 3, 10}, row{7, 3, 10}, row{8, 4, 8},
                      row{15, 4, 8}, row{16, 5, 6}, row{31, 5, 6}, row{32, 6, 5}, row{63, 6, 5}, row{64, 7, 4},
                      row{127, 7, 4}, row{128, 8, 4}, row{0xffffffffu, 32, 1}}) {
    const auto l = gs::sum_safe_layout::make(r.world);
    CHECK(l.width == r.width);
    CHECK(l.per_word == r.per_word);
    CHECK(l.world < (std::uint64_t{1} << l.width));  // a sum of W ones never carries out of a field
  }
  CHECK(gs::sum_safe_layout::make(4).words(0) == 0);
  CHECK(gs::sum_safe_layout::make(4).words(10) == 1);
  CHECK(gs::sum_safe_layout::make(4).words(11) == 2);
  // Field q of word w at bits [q * w, q * w + w): W = 4 -> 3 bits, 10 fields; position 13 is
  // field 3 of word 1.
  std::vector<std::uint32_t> bm(1, 1u << 13), packed(2);
  REQUIRE(gs::to_sum_safe(bm, 20, 4, packed).ok());
  CHECK(packed[0] == 0u);
  CHECK(packed[1] == 1u << 9);
}

TEST_CASE("sketch bitmap: sum-safe packing summed by the transport is the exact union, W = 2..64") {
  for (std::uint32_t world = 2; world <= 64; ++world) {
    const std::size_t count = 997 + 37 * world;  // not a multiple of 8, 32 or the fields per word
    const auto l = gs::sum_safe_layout::make(world);
    std::vector<std::uint32_t> sums(l.words(count), 0u), ored(gs::bitmap_words(count), 0u), packed(l.words(count));
    std::vector<std::uint32_t> keepers(count, 0u);
    // Every rank keeps a dense shared set (so positions kept by all W ranks occur) plus its own.
    const auto shared = random_bitmap(count, 0.2, 1000 + world);
    for (std::uint32_t r = 0; r < world; ++r) {
      auto bm = random_bitmap(count, 0.1, 77 * world + r);
      REQUIRE(gs::bitmap_or(bm, shared).ok());
      REQUIRE(gs::to_sum_safe(bm, count, world, packed).ok());
      for (std::size_t w = 0; w < sums.size(); ++w) sums[w] += packed[w];  // what a SUM transport does
      REQUIRE(gs::bitmap_or(ored, bm).ok());
      for (std::size_t j = 0; j < count; ++j) keepers[j] += gs::bitmap_test(bm.data(), j) ? 1u : 0u;
    }
    std::vector<std::uint32_t> decoded(gs::bitmap_words(count), 0xffffffffu);
    REQUIRE(gs::union_from_sum_safe(sums, count, world, decoded).ok());
    CHECK(decoded == ored);
    bool counts_ok = true;
    for (std::size_t j = 0; j < count; ++j) counts_ok = counts_ok && l.field(sums.data(), j) == keepers[j];
    CHECK(counts_ok);
  }
}

TEST_CASE("sketch bitmap: the host loops equal the per-word (device) functions") {
  for (std::uint32_t world : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 16u, 31u, 32u, 33u, 64u, 100u, 0xffffffffu}) {
    for (std::size_t count : {0u, 1u, 31u, 32u, 33u, 999u, 1024u, 4099u}) {
      const auto l = gs::sum_safe_layout::make(world);
      const auto bm = random_bitmap(count, 0.3, world + count);
      std::vector<std::uint32_t> packed(l.words(count)), uni(gs::bitmap_words(count));
      REQUIRE(gs::to_sum_safe(bm, count, world, packed).ok());
      bool same = true;
      for (std::size_t w = 0; w < packed.size(); ++w) {
        same = same && packed[w] == gs::sum_safe_word(bm.data(), w, count, l);
        same = same && gs::check_sum_safe_word(packed[w], w, count, l) == errc::ok;
      }
      REQUIRE(gs::union_from_sum_safe(packed, count, world, uni).ok());
      for (std::size_t w = 0; w < uni.size(); ++w) same = same && uni[w] == gs::union_word_from_sum_safe(packed.data(), w, count, l);
      CHECK(same);
      CHECK(uni == bm);
    }
  }
}

TEST_CASE("sketch bitmap: malformed sum-safe buffers are rejected, output untouched") {
  const std::uint32_t world = 4;  // 3-bit fields, 10 per word, bits 30-31 padding
  const std::size_t count = 25;   // 3 words; fields 5..9 of word 2 lie past count
  const std::vector<std::uint32_t> untouched(1, 0x12345678u);
  const auto rejects = [&](std::vector<std::uint32_t> sums, errc code) {
    std::vector<std::uint32_t> out = untouched;
    CHECK(gs::union_from_sum_safe(sums, count, world, out) == code);
    CHECK(out == untouched);
  };
  rejects({0u, 5u << 3, 0u}, errc::count_too_large);      // a field of 5 > W ranks
  rejects({0u, 1u << 30, 0u}, errc::bad_meta);            // padding bit
  rejects({0u, 0u, 1u << (3 * 5)}, errc::index_out_of_range);  // field 5 of word 2 = position 25
  rejects({0u, 0u}, errc::size_mismatch);
  std::vector<std::uint32_t> out(1);
  CHECK(gs::union_from_sum_safe(std::vector<std::uint32_t>{0u, 0u, 4u << 12}, count, world, out).ok());
  CHECK(out[0] == 1u << 24);  // field 4 of word 2 = position 24, kept by all four ranks
  CHECK(gs::union_from_sum_safe(std::vector<std::uint32_t>{0u}, 5, 0, out) == errc::invalid_argument);
  std::vector<std::uint32_t> bad_tail(1, 1u << 30), packed(3);
  CHECK(gs::to_sum_safe(bad_tail, count, world, packed) == errc::index_out_of_range);
}

namespace {

// The reduced gradient of W ranks over a union bitmap: the sum of the ranks' values at the
// union's positions, zero elsewhere (what the values phase produces with a correct sum).
std::vector<double> reduce_over(const std::vector<std::vector<float>>& x, const std::vector<bool>& uni) {
  std::vector<double> y(uni.size(), 0.0);
  for (std::size_t j = 0; j < uni.size(); ++j)
    if (uni[j])
      for (const auto& xr : x) y[j] += xr[j];
  return y;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    num += (a[j] - ref[j]) * (a[j] - ref[j]);
    den += ref[j] * ref[j];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("sketch bitmap: 1-bit bitmaps summed as uint8 bytes corrupt the union, OR and sum-safe do not") {
  const std::size_t count = 8192;
  for (std::uint32_t world : {2u, 4u, 8u}) {
    // Correlated gradients (a shared signal plus a per-rank part), each rank keeping its
    // largest 5% |x|: the kept sets overlap, as data-parallel gradients do.
    splitmix r(4242 + world);
    std::vector<float> shared(count);
    for (auto& v : shared) v = static_cast<float>(r.uniform() - 0.5) * static_cast<float>(r.uniform() < 0.1 ? 10 : 1);
    std::vector<std::vector<float>> x(world, std::vector<float>(count));
    std::vector<std::vector<std::uint32_t>> bm(world);
    for (std::uint32_t k = 0; k < world; ++k) {
      for (std::size_t j = 0; j < count; ++j) x[k][j] = shared[j] + 0.3f * static_cast<float>(r.uniform() - 0.5);
      std::vector<float> mag(count);
      for (std::size_t j = 0; j < count; ++j) mag[j] = std::fabs(x[k][j]);
      std::vector<float> sorted = mag;
      std::nth_element(sorted.begin(), sorted.begin() + count * 95 / 100, sorted.end());
      const float thr = sorted[count * 95 / 100];
      bm[k].assign(gs::bitmap_words(count), 0u);
      REQUIRE(gs::build_bitmap(count, [&](std::size_t j) { return mag[j] >= thr; }, std::span<std::uint32_t>(bm[k])).ok());
    }
    // The published exchange: 8 positions per byte, bytes added as uint8.
    std::vector<std::uint8_t> bytes(count / 8, 0);
    for (const auto& b : bm)
      for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<std::uint8_t>(bytes[i] + ((b[i / 4] >> (8 * (i % 4))) & 0xffu));
    // Ours: OR, and the sum-safe packing added as u32.
    std::vector<std::uint32_t> ored(gs::bitmap_words(count), 0u), safe_union(gs::bitmap_words(count));
    const auto l = gs::sum_safe_layout::make(world);
    std::vector<std::uint32_t> sums(l.words(count), 0u), packed(l.words(count));
    for (const auto& b : bm) {
      REQUIRE(gs::bitmap_or(ored, b).ok());
      REQUIRE(gs::to_sum_safe(b, count, world, packed).ok());
      for (std::size_t w = 0; w < sums.size(); ++w) sums[w] += packed[w];
    }
    REQUIRE(gs::union_from_sum_safe(sums, count, world, safe_union).ok());
    std::vector<bool> u_or(count), u_bytes(count), u_safe(count);
    std::size_t wrong = 0;
    for (std::size_t j = 0; j < count; ++j) {
      u_or[j] = gs::bitmap_test(ored.data(), j);
      u_safe[j] = gs::bitmap_test(safe_union.data(), j);
      u_bytes[j] = ((bytes[j / 8] >> (j % 8)) & 1u) != 0;
      wrong += u_bytes[j] != u_or[j] ? 1 : 0;
    }
    const auto ref = reduce_over(x, u_or);
    const double err_bytes = rel_l2(reduce_over(x, u_bytes), ref);
    MESSAGE("W = " << world << ": uint8-summed bitmap gets " << wrong << " of " << count
                   << " positions wrong, relative L2 error " << err_bytes);
    CHECK(wrong > count / 50);
    CHECK(err_bytes > 0.5);  // most of the gradient's energy sits where the ranks agree
    CHECK(rel_l2(reduce_over(x, u_safe), ref) == 0.0);
    CHECK(u_safe == u_or);
  }
}
