// The TAGC codec: presets and config checks, phase descriptions, the reduce-scatter flow on
// W = 2, 3, 4, 8 simulated ranks (both bitmap modes, both cell types, all-reduce too), exact
// error feedback, determinism, the fixed-ratio preset's partial peel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tagc/support.hpp"

using namespace gradcomp;
using namespace gradcomp::test::tagc;

TEST_CASE("tagc config: presets, validation, codec id") {
  const auto t2 = gt::preset_tagc2();
  CHECK(t2.select.density == 0.0125);
  CHECK(t2.rows == gt::sizing::ratio);
  CHECK(t2.ratio == 10.0);
  CHECK(t2.cells == summable::wire_type::bf16);
  const auto v1 = gt::preset_v1();
  CHECK(v1.select.density == 0.20);
  CHECK(v1.ratio == 2.0);
  CHECK(v1.cells == summable::wire_type::f32);
  const gt::config ours{};
  CHECK(ours.rows == gt::sizing::adaptive);
  CHECK(ours.cells_per_item == 1.5);
  for (const auto& c : {t2, v1, ours}) CHECK(gt::validate(c).ok());

  const auto bad = [](auto change) {
    gt::config c;
    change(c);
    return gt::validate(c).code();
  };
  CHECK(bad([](gt::config& c) { c.block = 0; }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.ratio = 0.5; }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.cells_per_item = 0.0; }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.cells = summable::wire_type::u32; }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.bitmap = static_cast<gt::bitmap_mode>(7); }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.max_rounds = 0; }) == errc::invalid_argument);
  CHECK(bad([](gt::config& c) { c.select.density = 0.0; }) == errc::invalid_argument);

  // The id follows what shapes the phases, not the selection's density.
  gt::config d = ours;
  d.select.density = 0.05;
  CHECK(gt::codec_id(d) == gt::codec_id(ours));
  CHECK(gt::select_fingerprint(d) != gt::select_fingerprint(ours));
  for (auto change : {+[](gt::config& c) { c.block = 32; }, +[](gt::config& c) { c.cells = summable::wire_type::f32; },
                      +[](gt::config& c) { c.bitmap = gt::bitmap_mode::sum_safe; },
                      +[](gt::config& c) { c.cells_per_item = 2.0; }, +[](gt::config& c) { c.rows = gt::sizing::ratio; }}) {
    gt::config e = ours;
    change(e);
    CHECK(gt::codec_id(e) != gt::codec_id(ours));
  }
}

TEST_CASE("tagc phases: bitmap (OR or sum-safe), then the sketch sized from the union") {
  const std::size_t n = 10001;
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe}) {
    gt::config cfg;
    cfg.bitmap = mode;
    const gt::codec c(cfg);
    auto st = make_ranks(c, n, 8);
    const auto p0 = c.describe(0, st[0]);
    REQUIRE(p0.ok());
    CHECK(p0->type == summable::wire_type::u32);
    CHECK_FALSE(p0->shardable);
    if (mode == gt::bitmap_mode::bitwise_or) {
      CHECK(p0->op == summable::reduction::bitwise_or);
      CHECK(p0->count == (n + 31) / 32);
      CHECK(p0->headroom_bits == 0);
    } else {
      CHECK(p0->op == summable::reduction::sum);
      CHECK(p0->headroom_bits == 4);  // W = 8: 4-bit fields, 8 per word
      CHECK(p0->count == (n + 7) / 8);
    }
    CHECK(c.describe(1, st[0]).code() == errc::invalid_argument);  // known after receive(0)
    CHECK(c.describe(2, st[0]).code() == errc::invalid_argument);
    std::vector<std::vector<float>> outs;
    REQUIRE(test::run_ranks(c, st, rank_grads(n, 8, 3, false), collective::reduce_scatter, outs).ok());
    // After a step the next one starts over at phase 0.
    CHECK(c.describe(1, st[0]).code() == errc::invalid_argument);
  }
}

namespace {

struct flow_case {
  std::uint32_t world;
  gt::bitmap_mode mode;
  summable::wire_type cells;
  collective how;
};

// One step on W ranks; checks, position by position, what the receivers decoded and what the
// residuals keep. Returns the fraction of the union that peeled.
double check_flow(const flow_case& f, std::size_t n, bool exact) {
  gt::config cfg;
  cfg.block = 16;
  cfg.bitmap = f.mode;
  cfg.cells = f.cells;
  const gt::codec c(cfg);
  auto st = make_ranks(c, n, f.world);
  for (auto& s : st)  // a previous residual, so that x = g + e
    for (std::size_t j = 0; j < n; ++j) s.residual[j] = exact ? static_cast<float>(j % 5) * 0x1.0p-10f : 1e-3f * static_cast<float>(j % 5);
  const auto before = st;
  const auto g = rank_grads(n, f.world, 7 + f.world, exact);
  std::vector<std::vector<float>> outs;
  REQUIRE(test::run_ranks(c, st, g, f.how, outs).ok());
  const std::vector<float> out = assemble(outs, n, f.how);
  const auto& uni = st[0].union_bits;
  double err = 0, norm = 0;
  std::size_t bad_off = 0, bad_on = 0;
  for (std::size_t j = 0; j < n; ++j) {
    float x_sum = 0.0f, e_sum = 0.0f;
    bool all_kept_out = true, all_zero = true;
    for (std::uint32_t r = 0; r < f.world; ++r) {
      const float x = g[r][j] + before[r].residual[j];
      x_sum += x;
      e_sum += st[r].residual[j];
      all_kept_out = all_kept_out && st[r].residual[j] == x;
      all_zero = all_zero && st[r].residual[j] == 0.0f;
    }
    if (!gs::bitmap_test(uni.data(), j)) {
      bad_off += out[j] != 0.0f || !all_kept_out;  // off the union nothing is sent
    } else if (exact && f.cells == summable::wire_type::f32) {
      // Peeled: the exact sum, nothing owed; not peeled: nothing delivered, all owed.
      bad_on += !((all_zero && out[j] == x_sum) || (all_kept_out && out[j] == 0.0f));
    }
    const double d = static_cast<double>(out[j]) + e_sum - x_sum;  // delivered + owed = given
    err += d * d;
    norm += static_cast<double>(x_sum) * x_sum;
  }
  CHECK(bad_off == 0);
  CHECK(bad_on == 0);
  if (exact && f.cells == summable::wire_type::f32) {
    CHECK(err == 0.0);
  } else {
    CHECK(std::sqrt(err / norm) < (f.cells == summable::wire_type::bf16 ? 2e-2 : 1e-5));
  }
  std::size_t items = 0, peeled = 0;
  for (std::uint32_t r = 0; r < f.world; ++r) {
    if (f.how == collective::reduce_scatter) {
      items += st[r].stats.items;
      peeled += st[r].stats.peeled;
    }
    CHECK(st[r].own.items == gs::bitmap_popcount(uni));  // every rank sent every union position
  }
  if (f.how == collective::all_reduce) items = st[0].stats.items, peeled = st[0].stats.peeled;
  CHECK(items == gs::bitmap_popcount(uni));
  return static_cast<double>(peeled) / static_cast<double>(items);
}

}  // namespace

TEST_CASE("tagc flow: reduce-scatter on W = 2, 3, 4, 8 ranks gives each its shard of the sum") {
  const std::size_t n = 120007;  // not a multiple of B, 32, a sum-safe word or W
  for (std::uint32_t world : {2u, 3u, 4u, 8u})
    for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe})
      for (summable::wire_type cells : {summable::wire_type::f32, summable::wire_type::bf16})
        for (bool exact : {true, false}) {
          CAPTURE(world);
          CAPTURE(static_cast<int>(mode));
          CAPTURE(static_cast<int>(cells));
          CAPTURE(exact);
          const double rate = check_flow({world, mode, cells, collective::reduce_scatter}, n, exact);
          CHECK(rate > 0.9);  // 1.5 cells per item, small lanes (docs/tagc.md, the peeling curve)
        }
}

TEST_CASE("tagc flow: all-reduce of the sketch decodes every shard on every rank") {
  for (std::uint32_t world : {3u, 4u}) CHECK(check_flow({world, gt::bitmap_mode::sum_safe, summable::wire_type::f32, collective::all_reduce}, 60001, true) > 0.75);
}

TEST_CASE("tagc adaptive sizing: kept positions crowded into a few lanes still peel") {
  // Large values only where j % B < 2 (a weight's few busy input features): every kept
  // position falls in 2 of B lanes. r follows the fullest lane, so each lane's hypergraph has
  // about 1.5 cells per item and peels, whatever B is.
  const std::size_t n = 100003;
  const std::uint32_t world = 4;
  for (std::uint32_t block : {1u, 8u, 64u}) {
    CAPTURE(block);
    gt::config cfg;
    cfg.block = block;
    cfg.cells = summable::wire_type::f32;
    const gt::codec c(cfg);
    auto st = make_ranks(c, n, world);
    auto g = rank_grads(n, world, 11, false);
    for (auto& gr : g)
      for (std::size_t j = 0; j < n; ++j) gr[j] = j % block < 2 ? gr[j] + 8.0f : gr[j] * 1e-3f;
    std::vector<std::vector<float>> outs;
    REQUIRE(test::run_ranks(c, st, g, collective::reduce_scatter, outs).ok());
    std::size_t items = 0, peeled = 0;
    for (const auto& s : st) items += s.stats.items, peeled += s.stats.peeled;
    REQUIRE(items > 0);
    // The fullest lane of any shard sizes r.
    std::size_t fullest = 0;
    for (std::uint32_t i = 0; i < world; ++i) {
      const chunk_range r = summable::shard_of(n, world, i);
      std::vector<std::size_t> lanes(block, 0);
      for (std::size_t j = 0; j < r.count; ++j) fullest = std::max(fullest, lanes[j % block] += gs::bitmap_test(st[0].union_bits.data(), r.offset + j));
    }
    CHECK(st[0].rows == static_cast<std::uint32_t>(std::ceil(cfg.cells_per_item * static_cast<double>(fullest))));
    CHECK(static_cast<double>(peeled) / static_cast<double>(items) > 0.97);
  }
}

TEST_CASE("tagc error feedback: over steps, delivered + owed == every gradient given, exactly") {
  const std::size_t n = 40009, world = 4;
  gt::config cfg;
  cfg.cells = summable::wire_type::f32;
  cfg.block = 8;
  const gt::codec c(cfg);
  auto st = make_ranks(c, n, world);
  std::vector<float> delivered(n, 0.0f), given(n, 0.0f);
  for (int step = 0; step < 6; ++step) {
    const auto g = rank_grads(n, world, 40 + step, true);
    for (const auto& gr : g)
      for (std::size_t j = 0; j < n; ++j) given[j] += gr[j];
    std::vector<std::vector<float>> outs;
    REQUIRE(test::run_ranks(c, st, g, collective::reduce_scatter, outs).ok());
    const auto out = assemble(outs, n, collective::reduce_scatter);
    for (std::size_t j = 0; j < n; ++j) delivered[j] += out[j];
  }
  std::size_t mismatches = 0;
  for (std::size_t j = 0; j < n; ++j) {
    float owed = 0.0f;
    for (const auto& s : st) owed += s.residual[j];
    mismatches += delivered[j] + owed != given[j];
  }
  CHECK(mismatches == 0);
  CHECK(st[0].step == 6);
  for (const auto& s : st) CHECK(s.thresholds[0] > 0.0f);  // each shard's threshold carried on
}

TEST_CASE("tagc determinism: the same bytes on every run") {
  const std::size_t n = 30011;
  const gt::codec c;
  std::vector<std::vector<std::vector<test::bytes>>> sent(2);
  std::vector<std::vector<float>> outs[2];
  for (int run = 0; run < 2; ++run) {
    auto st = make_ranks(c, n, 4);
    if (run == 1)  // scratch left dirty by someone else must not matter
      for (auto& s : st) std::fill(s.workspace.begin(), s.workspace.end(), std::byte{0x5a});
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<test::bytes>> buffers;
      REQUIRE(test::run_ranks(c, st, rank_grads(n, 4, 90 + step, false), collective::reduce_scatter, outs[run], &buffers).ok());
      sent[run].insert(sent[run].end(), buffers.begin(), buffers.end());
    }
  }
  CHECK(sent[0] == sent[1]);
  CHECK(outs[0] == outs[1]);
}

TEST_CASE("tagc presets: the fixed ratio 10 peels part of an 8-rank union, feedback stays exact") {
  const std::size_t n = 200003;
  gt::config cfg = gt::preset_tagc2();
  cfg.cells = summable::wire_type::f32;
  const gt::codec c(cfg);
  auto st = make_ranks(c, n, 8);
  std::vector<std::vector<float>> g;  // independent ranks: the union holds about 8 x 1.25%
  for (std::uint32_t r = 0; r < 8; ++r) g.push_back(test::sketch::dyadic_values(n, 500 + r));
  std::vector<std::vector<float>> outs;
  REQUIRE(test::run_ranks(c, st, g, collective::reduce_scatter, outs).ok());
  const auto out = assemble(outs, n, collective::reduce_scatter);
  std::size_t items = 0, peeled = 0;
  for (const auto& s : st) items += s.stats.items, peeled += s.stats.peeled;
  const double cells_per_item = 8.0 * st[0].rows * cfg.block / static_cast<double>(items);
  CHECK(cells_per_item < 1.3);
  CHECK(peeled < items);
  std::size_t mismatches = 0;
  for (std::size_t j = 0; j < n; ++j) {
    float x = 0.0f, owed = 0.0f;
    for (std::uint32_t r = 0; r < 8; ++r) x += g[r][j], owed += st[r].residual[j];
    mismatches += out[j] + owed != x;
  }
  CHECK(mismatches == 0);
}
