// Count sketch: geometry, block hashing (golden values), encode against a naive reference,
// round trips, linearity over ranks, the enter mask, determinism, malformed inputs.
#include <gradcomp/core/crc32c.hpp>
#include <gradcomp/core/murmur3.hpp>
#include <gradcomp/sketch/count_sketch.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "sketch/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::sketch;

TEST_CASE("sketch geometry: r = max(1, ceil(blocks / ratio)) and validation") {
  const auto g = gs::make_geometry(1000, 64, 10.0f);  // 16 blocks (the last holds 40 elements)
  REQUIRE(g.ok());
  CHECK(g->blocks == 16);
  CHECK(g->rows == 2);
  CHECK(g->cells() == 128);
  CHECK(gs::make_geometry(1000, 64, 1.0f)->rows == 16);
  CHECK(gs::make_geometry(1000, 64, 16.0f)->rows == 1);
  CHECK(gs::make_geometry(1000, 64, 1e9f)->rows == 1);
  CHECK(gs::make_geometry(0, 64, 4.0f)->rows == 1);
  CHECK(gs::make_geometry(10000000, 64, 10.0f)->rows == 15625);
  CHECK(gs::make_geometry(1000, 64, 0.5f).code() == errc::invalid_argument);
  CHECK(gs::make_geometry(1000, 64, std::numeric_limits<float>::quiet_NaN()).code() == errc::invalid_argument);
  CHECK(gs::make_geometry(1000, 64, std::numeric_limits<float>::infinity()).code() == errc::invalid_argument);
  CHECK(gs::make_geometry(1000, 0, 2.0f).code() == errc::invalid_argument);
  CHECK(gs::make_geometry_rows(1000, 64, 0).code() == errc::invalid_argument);
  CHECK(gs::make_geometry_rows(std::size_t{1} << 32, 64, 1).code() == errc::count_too_large);
  CHECK(gs::make_geometry_rows(1000, 1u << 16, 1u << 16).code() == errc::count_too_large);
  CHECK(gs::check(gs::geometry{1000, 64, 15, 2}) == errc::invalid_argument);  // blocks != ceil(1000 / 64)
}

TEST_CASE("sketch hashing: golden block mapping (values from an independent MurmurHash3)") {
  struct golden {
    std::uint32_t block, h[3], row97[3], neg;
  };
  const golden cases[] = {
      {0, {0x2362f9de, 0x78ed212d, 0x06dfadfc}, {69, 35, 34}, 0b000},
      {1, {0xfbf1402a, 0x5e11e574, 0x13d35112}, {30, 28, 44}, 0b001},
      {2, {0x40b23b7f, 0xdb9a7e8c, 0x2cdefd20}, {29, 55, 19}, 0b010},
      {1000, {0xffca7f79, 0x7f6a47bb, 0xb55ac806}, {80, 64, 61}, 0b101},
      {12345, {0x26134e01, 0x1da4935e, 0xc40191d6}, {41, 74, 48}, 0b100},
  };
  for (const auto& c : cases) {
    const auto m = gs::map_block(c.block, 97);
    CHECK(m.distinct == 3);
    for (std::uint32_t j = 0; j < 3; ++j) {
      CHECK(murmur3_u32(c.block, j) == c.h[j]);
      CHECK(m.row[j] == c.row97[j]);
    }
    CHECK(m.neg == c.neg);
  }
  // Shared sketch blocks: block 0 with r = 2 hashes to rows 0, 1, 0 (j = 2 folds into j = 0);
  // block 1 to rows 0, 0, 0: one cell, with the sign of j = 0 (-1) although j = 1, 2 say +1.
  const auto m0 = gs::map_block(0, 2);
  CHECK(m0.distinct == 2);
  CHECK(m0.row[0] == 0);
  CHECK(m0.row[1] == 1);
  CHECK(m0.neg == 0);
  const auto m1 = gs::map_block(1, 2);
  CHECK(m1.distinct == 1);
  CHECK(m1.row[0] == 0);
  CHECK(m1.neg == 1);
  // One kept element (block 1000, lane 5, B = 8) of value 1 lands in cells row * 8 + 5.
  const auto g = *gs::make_geometry_rows(8 * 1001, 8, 97);
  std::vector<std::uint32_t> bm(gs::bitmap_words(g.count), 0u);
  const std::size_t e = 8 * 1000 + 5;
  bm[e / 32] |= 1u << (e % 32);
  std::vector<float> x(g.count, 0.0f);
  x[e] = 1.0f;
  const auto cells = encode_all<float>(g, x, bm);
  REQUIRE(cells.size() == g.cells());
  std::vector<float> expect(g.cells(), 0.0f);
  expect[80 * 8 + 5] = -1.0f;
  expect[64 * 8 + 5] = 1.0f;
  expect[61 * 8 + 5] = -1.0f;
  CHECK(cells == expect);
}

namespace {

// The encode written from the specification, independently of the library's loops.
std::vector<float> naive_encode(const gs::geometry& g, const std::vector<float>& x, const std::vector<std::uint32_t>& bm) {
  std::vector<float> cells(g.cells(), 0.0f);
  for (std::uint32_t e = 0; e < g.count; ++e) {
    if (((bm[e / 32] >> (e % 32)) & 1u) == 0) continue;
    const std::uint32_t b = e / g.block, t = e % g.block;
    const unsigned char le[4] = {static_cast<unsigned char>(b), static_cast<unsigned char>(b >> 8),
                                 static_cast<unsigned char>(b >> 16), static_cast<unsigned char>(b >> 24)};
    std::vector<std::uint32_t> used;
    for (std::uint32_t j = 0; j < 3; ++j) {
      const std::uint32_t h = murmur3_x86_32(le, 4, j);
      if (std::find(used.begin(), used.end(), h % g.rows) != used.end()) continue;
      used.push_back(h % g.rows);
      cells[(h % g.rows) * g.block + t] += (h >> 31) ? -x[e] : x[e];
    }
  }
  return cells;
}

}  // namespace

TEST_CASE("sketch encode: matches the specification, bf16 cells are the rounded fp32 cells") {
  for (std::uint32_t block : {8u, 24u, 64u, 1024u}) {
    const std::size_t count = 50003;
    const auto bm = random_bitmap(count, 0.05, block);
    const auto x = wide_values(count, block + 1);
    const auto g = *gs::make_geometry(count, block, 3.0f);
    const auto cells = encode_all<float>(g, x, bm);
    CHECK(cells == naive_encode(g, x, bm));
    const auto cells16 = encode_all<bf16_t>(g, x, bm);
    REQUIRE(cells16.size() == cells.size());
    bool rounded = true;
    for (std::size_t c = 0; c < cells.size(); ++c) rounded = rounded && cells16[c] == bf16_t::from_float(cells[c]);
    CHECK(rounded);
  }
}

TEST_CASE("sketch round trip: peeled items are bit-exact with fp32 cells, tails included") {
  struct shape {
    std::size_t count;
    std::uint32_t block;
  };
  // Counts that are not multiples of B, 8 or 32; the last element is always kept.
  for (const shape s : {shape{100003, 8}, shape{300001, 64}, shape{299999, 100}, shape{1000001, 1024}}) {
    auto bm = random_bitmap(s.count, 0.05, s.count);
    bm[(s.count - 1) / 32] |= 1u << ((s.count - 1) % 32);
    const auto x = dyadic_values(s.count, s.block);
    for (double cpi : {1.5, 2.0, 3.0}) {
      const auto g = geometry_for(s.count, s.block, bm, cpi);
      const auto d = decode_all<float>(g, bm, encode_all<float>(g, x, bm));
      const double rate = double(d.stats.peeled) / d.stats.items;
      MESSAGE("count " << s.count << " B " << s.block << " cells/item " << cpi << ": peeled " << rate);
      // Per lane the sketch is a hypergraph of about items / B edges: B = 1024 leaves ~50 per
      // lane here, small enough for chance cycles at 1.5 cells per item.
      CHECK(rate >= (s.block == 1024 && cpi < 2.0 ? 0.85 : 0.99));
      std::size_t exact = 0, peeled = 0;
      for (std::size_t j = 0; j < s.count; ++j) {
        if (!test_bit(bm, j)) {
          exact += d.out[j] == 0.0f ? 0 : 1000000;  // off the bitmap: exactly zero
        } else if (test_bit(d.peeled, j)) {
          ++peeled;
          exact += d.out[j] == x[j] ? 1 : 0;
        }
      }
      CHECK(peeled == d.stats.peeled);
      CHECK(exact == peeled);
      CHECK(test_bit(d.peeled, s.count - 1) == (d.out[s.count - 1] == x[s.count - 1]));
    }
  }
}

TEST_CASE("sketch linearity: decoding the sum of W ranks' sketches gives the sum of their values") {
  const std::size_t count = 400009;
  const std::uint32_t block = 64;
  for (std::uint32_t world : {2u, 4u, 8u}) {
    std::vector<std::uint32_t> uni(gs::bitmap_words(count), 0u);
    for (std::uint32_t r = 0; r < world; ++r) REQUIRE(gs::bitmap_or(uni, random_bitmap(count, 0.0125, 500 + r)).ok());
    const auto g = geometry_for(count, block, uni, 2.0);
    for (bool dyadic : {true, false}) {
      std::vector<float> summed(g.cells(), 0.0f);
      std::vector<double> ref(count, 0.0);
      for (std::uint32_t r = 0; r < world; ++r) {
        const auto x = dyadic ? dyadic_values(count, 900 + r) : wide_values(count, 900 + r);
        const auto cells = encode_all<float>(g, x, uni);
        for (std::size_t c = 0; c < cells.size(); ++c) summed[c] += cells[c];  // the transport's SUM
        for (std::size_t j = 0; j < count; ++j) ref[j] += x[j];
      }
      const auto d = decode_all<float>(g, uni, summed);
      CHECK(double(d.stats.peeled) / d.stats.items >= 0.99);
      // Dyadic values: every partial sum is exact, so the decode is too. Otherwise each cell
      // and each subtraction rounds: the error is a few ulps of the largest value in a cell.
      double err2 = 0, ref2 = 0;
      std::size_t exact = 0;
      for (std::size_t j = 0; j < count; ++j) {
        if (!test_bit(d.peeled, j)) continue;
        const double ref_j = static_cast<double>(static_cast<float>(ref[j]));
        exact += static_cast<double>(d.out[j]) == ref_j ? 1 : 0;
        err2 += (d.out[j] - ref[j]) * (d.out[j] - ref[j]);
        ref2 += ref[j] * ref[j];
      }
      if (dyadic) CHECK(exact == d.stats.peeled);
      CHECK(std::sqrt(err2 / ref2) < (dyadic ? 1e-12 : 1e-5));
    }
  }
}

TEST_CASE("sketch enter mask: leaving unpeelable items out makes the summed sketch decode exactly") {
  const std::size_t count = 200003;
  for (double cpi : {0.8, 1.0, 1.2}) {  // low: many items do not peel
    std::vector<std::uint32_t> uni(gs::bitmap_words(count), 0u);
    for (std::uint32_t r = 0; r < 4; ++r) REQUIRE(gs::bitmap_or(uni, random_bitmap(count, 0.0125, 70 + r)).ok());
    const auto g = geometry_for(count, 32, uni, cpi);
    std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(uni)));
    std::vector<std::uint32_t> peelable(uni.size());
    const auto st = gs::structural_peel(g, uni, ws, peelable);
    REQUIRE(st.ok());
    CHECK(st->peeled < st->items);
    std::vector<float> summed(g.cells(), 0.0f), ref(count, 0.0f);
    for (std::uint32_t r = 0; r < 4; ++r) {
      const auto x = dyadic_values(count, 30 + r);
      const auto cells = encode_all<float>(g, x, uni, peelable);
      for (std::size_t c = 0; c < cells.size(); ++c) summed[c] += cells[c];
      for (std::size_t j = 0; j < count; ++j) ref[j] += test_bit(peelable, j) ? x[j] : 0.0f;
    }
    const auto d = decode_all<float>(g, uni, summed, gs::fallback::zero);
    CHECK(d.stats.peeled == st->peeled);
    CHECK(d.peeled == peelable);
    CHECK(d.out == ref);  // peelable positions exact, everything else zero
  }
}

TEST_CASE("sketch enter mask: unpeelable items in the cells change no peeled value (the TAGC codec enters them)") {
  const std::size_t count = 100003;
  const auto uni = random_bitmap(count, 0.05, 5);
  for (double cpi : {0.9, 1.2}) {
    const auto g = geometry_for(count, 16, uni, cpi);
    std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(uni)));
    std::vector<std::uint32_t> peelable(uni.size());
    REQUIRE(gs::structural_peel(g, uni, ws, peelable).ok());
    const auto x = wide_values(count, 6);
    for (const bool bf16 : {false, true}) {
      const auto all = bf16 ? decode_all<bf16_t>(g, uni, encode_all<bf16_t>(g, x, uni), gs::fallback::zero)
                            : decode_all<float>(g, uni, encode_all<float>(g, x, uni), gs::fallback::zero);
      const auto some = bf16 ? decode_all<bf16_t>(g, uni, encode_all<bf16_t>(g, x, uni, peelable), gs::fallback::zero)
                             : decode_all<float>(g, uni, encode_all<float>(g, x, uni, peelable), gs::fallback::zero);
      CHECK(all.stats.peeled < all.stats.items);
      CHECK(all.peeled == some.peeled);
      CHECK(std::memcmp(all.out.data(), some.out.data(), 4 * count) == 0);  // the same bits
    }
  }
}

TEST_CASE("sketch determinism: the same bytes on every run, whatever the workspace held") {
  const std::size_t count = 100000;
  const auto bm = random_bitmap(count, 0.05, 11);
  const auto x = wide_values(count, 12);
  const auto g = geometry_for(count, 64, bm, 1.3);
  const auto cells = encode_all<float>(g, x, bm);
  const auto cells16 = encode_all<bf16_t>(g, x, bm);
  const auto crc = [](const auto& v) { return crc32c(std::as_bytes(std::span(v))); };
  std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(bm)));
  std::vector<std::uint32_t> outs;
  for (int run = 0; run < 3; ++run) {
    std::memset(ws.data(), run * 0x5b, ws.size());
    std::vector<float> out(count);
    const auto st = gs::decode<float>(g, bm, cells, ws, out);
    REQUIRE(st.ok());
    outs.push_back(crc(out));
    CHECK(encode_all<float>(g, x, bm) == cells);
  }
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
  // Pinned: a change of any of these is a change of the algorithm's bits (and of the bits a
  // GPU implementation must reproduce).
  CHECK(crc(bm) == 926087844u);
  CHECK(crc(x) == 4235928508u);
  CHECK(crc(cells) == 1272354551u);
  CHECK(crc(cells16) == 2760937343u);
  CHECK(outs[0] == 1020110634u);
}

TEST_CASE("sketch cells: NaN is canonical whatever the operand order or the payload") {
  // Four items in one cell (r = 1, B = 1): NaNs of both signs and a payload, then a number.
  const std::size_t count = 4;
  const std::vector<std::uint32_t> bm{0xfu};
  const auto g = *gs::make_geometry_rows(count, 1, 1);
  const std::vector<float> x{bits_float(0xffc00000u), bits_float(0x7fc00000u), bits_float(0x7f800123u), 1.0f};
  CHECK(float_bits(encode_all<float>(g, x, bm)[0]) == 0x7fc00000u);
  CHECK(encode_all<bf16_t>(g, x, bm)[0].bits == 0x7fc0u);
  // A cell delivered with another NaN (a GPU's 0x7fffffff, a signalling payload) peels to the
  // canonical NaN with the item's sign.
  const std::vector<std::uint32_t> one{0x1u};
  const auto g1 = *gs::make_geometry_rows(1, 1, 1);
  for (const std::uint32_t cell : {0x7fffffffu, 0xff800001u, 0x7fa00000u}) {
    const auto d = decode_all<float>(g1, one, std::vector<float>{bits_float(cell)});
    const bool neg = (gs::map_block(0, 1).neg & 1u) != 0;
    CHECK(d.stats.peeled == 1);
    CHECK(float_bits(d.out[0]) == (neg ? 0xffc00000u : 0x7fc00000u));
  }
}
