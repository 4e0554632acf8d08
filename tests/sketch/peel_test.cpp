// Peeling: the structural peel is the value peel's peeled set, the fallback estimates on
// configurations that cannot peel, the success rate, malformed and non-finite inputs.
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

TEST_CASE("sketch peel: the structural peel is exactly the value peel's peeled set") {
  const std::size_t count = 150001;
  for (std::uint32_t block : {16u, 64u}) {
    const auto bm = random_bitmap(count, 0.05, block);
    for (double cpi : {0.5, 0.8, 1.0, 1.2, 1.25, 1.5, 2.0, 3.0}) {
      const auto g = geometry_for(count, block, bm, cpi);
      std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(bm)));
      std::vector<std::uint32_t> peelable(bm.size());
      const auto st = gs::structural_peel(g, bm, ws, peelable);
      REQUIRE(st.ok());
      // Any cell values, NaN and infinities included: the schedule does not look at them.
      auto cells = wide_values(g.cells(), 5);
      cells[0] = std::numeric_limits<float>::quiet_NaN();
      cells[1] = std::numeric_limits<float>::infinity();
      const auto d = decode_all<float>(g, bm, cells);
      CHECK(d.peeled == peelable);
      CHECK(d.stats.items == st->items);
      CHECK(d.stats.peeled == st->peeled);
      CHECK(d.stats.rounds == st->rounds);
      CHECK(gs::bitmap_popcount(peelable) == st->peeled);
    }
  }
}

namespace {

// Two kept elements, lane 1 of the first two blocks that hash to `distinct` different sketch
// blocks among r = distinct: they share every cell, so neither can peel. A third element, in
// lane 2 of the first block, is alone in its cells and peels.
struct stuck {
  gs::geometry g;
  std::vector<std::uint32_t> bm;
  std::vector<float> x;
  std::uint32_t e1 = 0, e2 = 0, e3 = 0;
};

stuck make_stuck(std::uint32_t distinct) {
  std::vector<std::uint32_t> blocks;
  for (std::uint32_t b = 0; blocks.size() < 2; ++b)
    if (gs::map_block(b, distinct).distinct == distinct) blocks.push_back(b);
  stuck s;
  s.g = *gs::make_geometry_rows(4 * (blocks[1] + 1), 4, distinct);
  s.e1 = 4 * blocks[0] + 1;
  s.e2 = 4 * blocks[1] + 1;
  s.e3 = 4 * blocks[0] + 2;
  s.bm.assign(gs::bitmap_words(s.g.count), 0u);
  s.x.assign(s.g.count, 0.0f);
  for (auto [e, v] : {std::pair{s.e1, 3.0f}, std::pair{s.e2, 5.0f}, std::pair{s.e3, -7.0f}}) {
    s.bm[e / 32] |= 1u << (e % 32);
    s.x[e] = v;
  }
  return s;
}

// What the median (or mean, or single cell) of an item's signed cells must be, from the cells.
float expected_fallback(const stuck& s, const std::vector<float>& cells, std::uint32_t e) {
  const auto m = gs::map_block(e / 4, s.g.rows);
  std::vector<float> v;
  for (std::uint32_t k = 0; k < m.distinct; ++k) {
    const float c = cells[m.row[k] * 4 + e % 4];
    v.push_back(((m.neg >> k) & 1u) ? -c : c);
  }
  std::sort(v.begin(), v.end());
  if (v.size() == 3) return v[1];
  if (v.size() == 2) return (v[0] + v[1]) * 0.5f;
  return v[0];
}

}  // namespace

namespace {

// The schedule as specified, written plainly (what a GPU does: every round scans all items,
// then every cell walks its items in ascending element order), with the sketch's own cell
// layout; the library's frontier, lane-major host loop must give the same bits.
struct reference_result {
  std::vector<float> out;
  std::vector<bool> peeled;
  std::uint32_t rounds = 0;
};

reference_result reference_decode(const gs::geometry& g, const std::vector<std::uint32_t>& bm,
                                  const std::vector<float>& cells) {
  struct item {
    std::uint32_t e;
    std::vector<std::uint32_t> cell;
    std::vector<bool> neg;
  };
  std::vector<item> items;
  std::vector<std::vector<std::uint32_t>> members(g.cells());
  for (std::uint32_t e = 0; e < g.count; ++e) {
    if (!test_bit(bm, e)) continue;
    const auto m = gs::map_block(e / g.block, g.rows);
    item it{e, {}, {}};
    for (std::uint32_t k = 0; k < m.distinct; ++k) {
      it.cell.push_back(m.row[k] * g.block + e % g.block);
      it.neg.push_back(((m.neg >> k) & 1u) != 0);
      members[it.cell.back()].push_back(static_cast<std::uint32_t>(items.size()));
    }
    items.push_back(it);
  }
  std::vector<float> residual = cells, value(items.size());
  std::vector<std::uint32_t> live(g.cells());
  for (std::size_t c = 0; c < g.cells(); ++c) live[c] = static_cast<std::uint32_t>(members[c].size());
  std::vector<int> round_of(items.size(), -1);
  reference_result r;
  for (int round = 0;; ++round) {
    bool any = false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (round_of[i] >= 0) continue;
      for (std::size_t k = 0; k < items[i].cell.size(); ++k)
        if (live[items[i].cell[k]] == 1) {
          value[i] = items[i].neg[k] ? -residual[items[i].cell[k]] : residual[items[i].cell[k]];
          round_of[i] = round;
          any = true;
          break;
        }
    }
    if (!any) break;
    ++r.rounds;
    for (std::size_t c = 0; c < g.cells(); ++c)
      for (std::uint32_t i : members[c]) {
        if (round_of[i] != round) continue;
        const auto k = static_cast<std::size_t>(std::find(items[i].cell.begin(), items[i].cell.end(), c) - items[i].cell.begin());
        residual[c] = residual[c] - (items[i].neg[k] ? -value[i] : value[i]);
        --live[c];
      }
  }
  r.out.assign(g.count, 0.0f);
  r.peeled.assign(g.count, false);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (round_of[i] >= 0) {
      r.out[items[i].e] = value[i];
      r.peeled[items[i].e] = true;
      continue;
    }
    std::vector<float> v;
    for (std::size_t k = 0; k < items[i].cell.size(); ++k)
      v.push_back(items[i].neg[k] ? -residual[items[i].cell[k]] : residual[items[i].cell[k]]);
    std::sort(v.begin(), v.end());
    r.out[items[i].e] = v.size() == 3 ? v[1] : v.size() == 2 ? (v[0] + v[1]) * 0.5f : v[0];
  }
  return r;
}

}  // namespace

TEST_CASE("sketch peel: bit-identical to the plain round-synchronous schedule") {
  const std::size_t count = 30011;
  for (std::uint32_t block : {8u, 64u}) {
    for (double cpi : {0.8, 1.2, 1.6}) {
      const auto bm = random_bitmap(count, 0.05, block + 3);
      const auto g = geometry_for(count, block, bm, cpi);
      std::vector<float> summed(g.cells(), 0.0f);
      for (std::uint32_t r = 0; r < 3; ++r) {  // wide values: rounding makes the order visible
        const auto cells = encode_all<float>(g, wide_values(count, 60 + r), bm);
        for (std::size_t c = 0; c < cells.size(); ++c) summed[c] += cells[c];
      }
      const auto d = decode_all<float>(g, bm, summed);
      const auto ref = reference_decode(g, bm, summed);
      CHECK(std::memcmp(d.out.data(), ref.out.data(), 4 * count) == 0);
      CHECK(d.stats.rounds == ref.rounds);
      std::size_t same = 0;
      for (std::size_t j = 0; j < count; ++j) same += test_bit(d.peeled, j) == ref.peeled[j] ? 1 : 0;
      CHECK(same == count);
    }
  }
}

TEST_CASE("sketch peel: per-item math (singleton cell, fallback, signs)") {
  const std::uint32_t live[5] = {2, 1, 0, 1, 3};
  const std::uint32_t cells[3] = {0, 3, 1};
  CHECK(gs::singleton_cell(live, cells, 3) == 1);  // cells 3 and 1 hold one item: the first in j order
  CHECK(gs::singleton_cell([&](std::uint32_t c) { return live[c]; }, cells, 1) == 1);  // none among 1 cell
  const std::uint32_t none[2] = {0, 4};
  CHECK(gs::singleton_cell(live, none, 2) == 2);
  const float v3[3] = {5.0f, -1.0f, 2.0f}, v2[2] = {3.0f, 4.0f}, v1[1] = {-6.0f};
  CHECK(gs::fallback_estimate(v3, 3) == 2.0f);
  CHECK(gs::fallback_estimate(v2, 2) == 3.5f);
  CHECK(gs::fallback_estimate(v1, 1) == -6.0f);
  CHECK(gs::subtract_item(1.0f, true, 2.0f) == 3.0f);
  CHECK(gs::subtract_item(1.0f, false, 2.0f) == -1.0f);
  const auto m = gs::map_block(1000, 97);
  const std::uint8_t info = gs::item_info(m);
  CHECK(gs::info_distinct(info) == 3);
  CHECK(gs::info_neg(info, 0));
  CHECK_FALSE(gs::info_neg(info, 1));
  CHECK(gs::info_neg(info, 2));
}

TEST_CASE("sketch peel: unpeelable items get the median, mean or single signed cell") {
  for (std::uint32_t distinct : {3u, 2u, 1u}) {
    const stuck s = make_stuck(distinct);
    const auto cells = encode_all<float>(s.g, s.x, s.bm);
    const auto d = decode_all<float>(s.g, s.bm, cells);
    CHECK(d.stats.items == 3);
    CHECK(d.stats.peeled == 1);
    CHECK(d.stats.rounds == 1);
    CHECK(test_bit(d.peeled, s.e3));
    CHECK(d.out[s.e3] == -7.0f);
    for (std::uint32_t e : {s.e1, s.e2}) {
      CHECK_FALSE(test_bit(d.peeled, e));
      CHECK(d.out[e] == expected_fallback(s, cells, e));
    }
    // With r = 1 both items sit in one cell: each reads its signed sum, 3 +- 5.
    if (distinct == 1) CHECK(std::fabs(d.out[s.e1]) == (gs::map_block(s.e1 / 4, 1).neg == gs::map_block(s.e2 / 4, 1).neg ? 8.0f : 2.0f));
    const auto z = decode_all<float>(s.g, s.bm, cells, gs::fallback::zero);
    CHECK(z.out[s.e1] == 0.0f);
    CHECK(z.out[s.e2] == 0.0f);
    CHECK(z.out[s.e3] == -7.0f);
  }
}

TEST_CASE("sketch peel: success rate rises with cells per item, complete from 1.5 at 1e6 elements") {
  const std::size_t count = 1000000;
  std::vector<std::uint32_t> uni(gs::bitmap_words(count), 0u);
  for (std::uint32_t r = 0; r < 4; ++r) REQUIRE(gs::bitmap_or(uni, random_bitmap(count, 0.0125, 40 + r)).ok());
  double previous = 0;
  for (double cpi : {0.8, 1.1, 1.3, 1.5, 2.0}) {
    const auto g = geometry_for(count, 64, uni, cpi);
    std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(uni)));
    std::vector<std::uint32_t> peelable(uni.size());
    const auto st = gs::structural_peel(g, uni, ws, peelable);
    REQUIRE(st.ok());
    const double rate = double(st->peeled) / st->items;
    MESSAGE("cells/item " << cpi << ": peeled " << rate << " in " << st->rounds << " rounds");
    CHECK(rate >= previous);
    if (cpi >= 1.5) CHECK(rate >= 0.995);
    if (cpi <= 0.8) CHECK(rate < 0.5);
    previous = rate;
  }
}

TEST_CASE("sketch decode and encode: malformed inputs are rejected, outputs untouched") {
  const std::size_t count = 1001;
  const auto bm = random_bitmap(count, 0.1, 3);
  const auto x = dyadic_values(count, 4);
  const auto g = geometry_for(count, 8, bm, 2.0);
  const auto cells = encode_all<float>(g, x, bm);
  std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(bm)) + 8);
  const std::vector<float> out0(count, -1.0f);
  const std::vector<std::uint32_t> peeled0(bm.size(), 0xabcdu);
  const auto rejects = [&](const gs::geometry& gg, std::span<const std::uint32_t> b, std::span<const float> c,
                           std::span<std::byte> w, std::size_t out_size, std::size_t peeled_size, errc code) {
    std::vector<float> out(out_size, -1.0f);
    std::vector<std::uint32_t> peeled(peeled_size, 0xabcdu);
    const auto st = gs::decode<float>(gg, b, c, w, out, {gs::fallback::median, peeled});
    CHECK(st.code() == code);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == -1.0f; }));
    CHECK(std::all_of(peeled.begin(), peeled.end(), [](std::uint32_t v) { return v == 0xabcdu; }));
  };
  const std::span<std::byte> wsp(ws);
  rejects(g, bm, std::span(cells).first(cells.size() - 1), wsp, count, bm.size(), errc::size_mismatch);
  rejects(g, std::span(bm).first(bm.size() - 1), cells, wsp, count, bm.size(), errc::size_mismatch);
  auto tail = bm;
  tail.back() |= 1u << 31;  // position 1023 >= 1001
  rejects(g, tail, cells, wsp, count, bm.size(), errc::index_out_of_range);
  rejects(g, bm, cells, wsp, count - 1, bm.size(), errc::size_mismatch);
  rejects(g, bm, cells, wsp, count, bm.size() + 1, errc::size_mismatch);
  rejects(g, bm, cells, wsp.first(ws.size() - 16), count, bm.size(), errc::buffer_too_small);
  rejects(g, bm, cells, wsp.subspan(4), count, bm.size(), errc::invalid_argument);  // misaligned
  rejects(gs::geometry{g.count, g.block, g.blocks, 0}, bm, cells, wsp, count, bm.size(), errc::invalid_argument);
  rejects(gs::geometry{g.count, g.block, g.blocks + 1, g.rows}, bm, cells, wsp, count, bm.size(), errc::invalid_argument);
  std::vector<std::uint32_t> peelable(bm.size() + 1, 7u);
  CHECK(gs::structural_peel(g, bm, wsp, peelable).code() == errc::size_mismatch);
  CHECK(peelable == std::vector<std::uint32_t>(bm.size() + 1, 7u));
  // Encode.
  const auto enc_rejects = [&](std::span<const float> xx, std::span<const std::uint32_t> b,
                               std::span<const std::uint32_t> enter, std::size_t ws_bytes, std::size_t cells_size,
                               errc code) {
    std::vector<std::byte> w(ws_bytes);
    std::vector<bf16_t> c(cells_size, bf16_t{0x1234});
    CHECK(gs::encode<bf16_t>(g, xx, b, enter, w, c) == code);
    CHECK(std::all_of(c.begin(), c.end(), [](bf16_t v) { return v.bits == 0x1234; }));
  };
  const std::size_t wsb = gs::encode_workspace_bytes<bf16_t>(g);
  enc_rejects(std::span(x).first(count - 1), bm, {}, wsb, g.cells(), errc::size_mismatch);
  enc_rejects(x, tail, {}, wsb, g.cells(), errc::index_out_of_range);
  enc_rejects(x, bm, std::span(bm).first(1), wsb, g.cells(), errc::size_mismatch);
  enc_rejects(x, bm, {}, wsb, g.cells() + 1, errc::size_mismatch);
  enc_rejects(x, bm, {}, wsb - 4, g.cells(), errc::buffer_too_small);
  std::vector<std::byte> w(wsb);
  std::vector<bf16_t> c(g.cells());
  CHECK(gs::encode<bf16_t>(g, x, bm, {}, w, c).ok());  // the same call with valid arguments
}

TEST_CASE("sketch decode: non-finite cells are values, not errors") {
  const std::size_t count = 20011;
  const auto bm = random_bitmap(count, 0.05, 21);
  const auto x = dyadic_values(count, 22);
  const auto g = geometry_for(count, 16, bm, 3.0);
  auto cells = encode_all<float>(g, x, bm);
  const auto clean = decode_all<float>(g, bm, cells);
  // A cell no item uses may hold anything; an item whose cells are all NaN decodes to NaN.
  std::vector<std::uint32_t> degree(g.cells(), 0u);
  std::uint32_t target = 0;
  for (std::uint32_t e = 0; e < count; ++e) {
    if (!test_bit(bm, e)) continue;
    target = e;
    const auto m = gs::map_block(e / 16, g.rows);
    for (std::uint32_t k = 0; k < m.distinct; ++k) ++degree[gs::cell_index(m, k, e % 16, 16)];
  }
  const auto empty = static_cast<std::size_t>(std::find(degree.begin(), degree.end(), 0u) - degree.begin());
  REQUIRE(empty < degree.size());
  cells[empty] = std::numeric_limits<float>::infinity();
  CHECK(decode_all<float>(g, bm, cells).out == clean.out);
  const auto m = gs::map_block(target / 16, g.rows);
  for (std::uint32_t k = 0; k < m.distinct; ++k) cells[gs::cell_index(m, k, target % 16, 16)] = std::numeric_limits<float>::quiet_NaN();
  const auto d = decode_all<float>(g, bm, cells);
  CHECK(d.stats.peeled == clean.stats.peeled);
  CHECK(std::isnan(d.out[target]));
}
