// The per-thread formulation (sketch/steps.hpp) run as plain loops, one "thread" after
// another and one "kernel" after another, as cuda/tagc.cuh launches it: the same bits as the
// host encode, decode and structural peel, for every block size, density, sketch size and
// round bound, NaN and infinity included.
#include <gradcomp/sketch/steps.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "sketch/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::sketch;
namespace gp = gradcomp::sketch::detail;

namespace {

// Everything the GPU keeps in its workspace, built by the loops of the kernels.
struct layout {
  std::size_t items = 0, slots = 0;
  std::vector<std::uint32_t> word_items, elem, slot_key, slot_val, sorted_key, sorted_val, start;
  std::vector<std::uint8_t> info;
};

layout build(const gs::geometry& g, const std::vector<std::uint32_t>& bm, std::size_t spare) {
  layout l;
  const std::size_t words = bm.size();
  l.word_items.assign(words + 1, 0);
  for (std::size_t w = 0; w < words; ++w) l.word_items[w + 1] = l.word_items[w] + gs::popcount32(bm[w]);
  l.items = l.word_items[words];
  const std::size_t capacity = l.items + spare;  // the GPU sorts up to its capacity
  l.slots = 3 * capacity;
  l.elem.assign(capacity, 0);
  l.info.assign(capacity, 0);
  l.slot_key.assign(l.slots, static_cast<std::uint32_t>(g.cells()));
  l.slot_val.assign(l.slots, 0);
  for (std::size_t w = 0; w < words; ++w)
    gp::write_items(w, g, bm.data(), l.word_items.data(), l.elem.data(), l.info.data(), l.slot_key.data(), l.slot_val.data());
  std::vector<std::size_t> order(l.slots);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return l.slot_key[a] < l.slot_key[b]; });
  for (std::size_t p : order) l.sorted_key.push_back(l.slot_key[p]), l.sorted_val.push_back(l.slot_val[p]);
  l.start.assign(g.cells() + 1, 0xdeadbeefu);
  for (std::size_t p = 0; p <= l.slots; ++p)
    gp::cell_bounds(p, l.slots, l.sorted_key.data(), static_cast<std::uint32_t>(g.cells()), l.start.data());
  return l;
}

std::vector<float> steps_encode(const gs::geometry& g, const layout& l, const std::vector<float>& x) {
  std::vector<float> cells(g.cells());
  for (std::uint32_t c = 0; c < g.cells(); ++c)
    cells[c] = gp::encode_cell(c, l.start.data(), l.sorted_val.data(), l.elem.data(), l.info.data(), x.data());
  return cells;
}

struct peeled_result {
  std::vector<float> out;
  std::vector<std::uint32_t> bits;
  gs::peel_stats stats;
};

// cells empty: the structural peel.
peeled_result steps_peel(const gs::geometry& g, const layout& l, const std::vector<std::uint32_t>& bm,
                            const std::vector<float>& cells, std::uint32_t max_rounds, bool median) {
  const bool values = !cells.empty();
  std::vector<std::uint32_t> live(g.cells()), peeled_in(l.elem.size(), 0);
  std::vector<float> residual(values ? cells : std::vector<float>{}), value(l.elem.size(), 0.0f);
  for (std::size_t c = 0; c < g.cells(); ++c) live[c] = l.start[c + 1] - l.start[c];
  peeled_result r;
  r.stats.items = static_cast<std::uint32_t>(l.items);
  for (std::uint32_t round = 0; round < max_rounds; ++round) {
    bool progress = false;
    for (std::uint32_t i = 0; i < l.items; ++i)
      progress = gp::choose_item(i, round, l.slot_key.data(), l.info.data(), live.data(), values ? residual.data() : nullptr,
                                 peeled_in.data(), values ? value.data() : nullptr) || progress;
    if (!progress) break;  // the GPU's later rounds see the flag and return at once
    ++r.stats.rounds;
    for (std::uint32_t c = 0; c < g.cells(); ++c)
      gp::subtract_cell(c, round, l.start.data(), l.sorted_val.data(), l.info.data(), peeled_in.data(), value.data(),
                        live.data(), values ? residual.data() : nullptr);
  }
  r.out.assign(g.count, -5.0f);
  r.bits.assign(bm.size(), 0);
  for (std::size_t w = 0; w < bm.size(); ++w) {
    r.bits[w] = gp::output_word(w, g.count, bm.data(), l.word_items.data(), l.slot_key.data(), l.info.data(), peeled_in.data(),
                                value.data(), values ? residual.data() : nullptr, median, values ? r.out.data() : nullptr);
    r.stats.peeled += gs::popcount32(r.bits[w]);
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

}  // namespace

TEST_CASE("sketch steps: the per-thread steps give the host's encode, decode and structural peel, bit for bit") {
  std::uint64_t seed = 1;
  for (std::size_t count : {std::size_t{1}, std::size_t{999}, std::size_t{20011}})
    for (std::uint32_t block : {1u, 4u, 16u, 64u})
      for (double density : {0.03, 0.3})
        for (double cpi : {0.6, 1.1, 1.4, 2.5}) {
          CAPTURE(count);
          CAPTURE(block);
          CAPTURE(density);
          CAPTURE(cpi);
          const auto bm = random_bitmap(count, density, ++seed);
          const auto g = geometry_for(count, block, bm, cpi);
          const layout l = build(g, bm, seed % 3 == 0 ? 0 : 7);
          const auto x = wide_values(count, seed);
          // Encode: fp32 cells and their bf16 rounding.
          const auto cells = steps_encode(g, l, x);
          CHECK(same_bits(cells, encode_all<float>(g, x, bm)));
          const auto bf = encode_all<bf16_t>(g, x, bm);
          std::size_t bf_differ = 0;
          for (std::size_t c = 0; c < cells.size(); ++c) bf_differ += !(bf16_t::from_float(cells[c]) == bf[c]);
          CHECK(bf_differ == 0);
          // Decode of cells holding anything, NaN and infinity included, with and without a bound.
          auto summed = wide_values(g.cells(), seed + 1);
          for (std::size_t c = 0; c < summed.size(); ++c) summed[c] += cells[c];
          if (summed.size() > 2) summed[1] = std::numeric_limits<float>::quiet_NaN(), summed[2] = std::numeric_limits<float>::infinity();
          for (std::uint32_t bound : {0u, 1u, 3u}) {
            for (gs::fallback fb : {gs::fallback::median, gs::fallback::zero}) {
              std::vector<std::byte> ws(gs::peel_workspace_bytes(g, l.items));
              std::vector<float> out(count, -5.0f);
              std::vector<std::uint32_t> bits(bm.size(), 0xffu);
              const auto st = gs::decode<float>(g, bm, summed, ws, out, {fb, bits, bound});
              REQUIRE(st.ok());
              const auto par = steps_peel(g, l, bm, summed, bound == 0 ? 0xffffffffu : bound, fb == gs::fallback::median);
              CHECK(same_bits(par.out, out));
              CHECK(par.bits == bits);
              CHECK(par.stats.items == st->items);
              CHECK(par.stats.peeled == st->peeled);
              CHECK(par.stats.rounds == st->rounds);
            }
            std::vector<std::byte> ws(gs::peel_workspace_bytes(g, l.items));
            std::vector<std::uint32_t> peelable(bm.size());
            const auto sp = gs::structural_peel(g, bm, ws, peelable, bound);
            REQUIRE(sp.ok());
            const auto par = steps_peel(g, l, bm, {}, bound == 0 ? 0xffffffffu : bound, false);
            CHECK(par.bits == peelable);
            CHECK(par.stats.peeled == sp->peeled);
            CHECK(par.stats.rounds == sp->rounds);
          }
        }
}

TEST_CASE("sketch steps: a bounded number of rounds leaves the later items unpeeled, on both forms") {
  const std::size_t count = 50000;
  const auto bm = random_bitmap(count, 0.05, 77);
  const auto g = geometry_for(count, 16, bm, 1.3);
  std::vector<std::byte> ws(gs::peel_workspace_bytes(g, gs::bitmap_popcount(bm)));
  std::vector<std::uint32_t> all(bm.size()), two(bm.size());
  const auto full = gs::structural_peel(g, bm, ws, all);
  const auto bounded = gs::structural_peel(g, bm, ws, two, 2);
  REQUIRE(full.ok());
  REQUIRE(bounded.ok());
  CHECK(full->rounds > 2);
  CHECK(bounded->rounds == 2);
  CHECK(bounded->peeled < full->peeled);
  for (std::size_t w = 0; w < bm.size(); ++w) CHECK((two[w] & ~all[w]) == 0u);  // a prefix of the schedule
}

TEST_CASE("sketch steps: the threshold bitmap word") {
  const std::vector<float> x{0.5f, -0.25f, 1.0f, -1.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), -0.5f};
  const gp::abs_at_least keep{x.data(), abs_key(0.5f)};
  CHECK(gs::bitmap_word(keep, 0, x.size()) == 0b1101101u);  // NaN sorts above every number
}
