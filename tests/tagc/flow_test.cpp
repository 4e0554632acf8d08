// The GPU's TAGC codec (tagc/flow.hpp, the flow cuda/tagc.cuh launches) run with
// host loops, side by side with tagc::codec on W simulated ranks: the same phase bytes, union,
// r, residuals, thresholds, decoded values and statistics, step after step, for both bitmap
// modes, both cell types, both sketch layouts, reduce-scatter and all-reduce, every path of
// the threshold search (the previous threshold, the sample's start, adjustments, the exact
// top-k with ties cut by index), empty and tiny shards, NaN and infinity. Errors:
// flow_errors_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tagc/twins.hpp"

using namespace gradcomp;
using namespace gradcomp::test::tagc;
using test::bytes;

namespace {

void run_case(const gt::config& c, std::size_t n, std::uint32_t world, grads kind, collective how, int steps,
              gradcomp::tagc::sketch_layout layout = gradcomp::tagc::sketch_layout::packed, bool* exact = nullptr) {
  twins t(c, n, world, layout);
  for (int s = 0; s < steps; ++s) t.step(make_grads(kind, n, world, 100 * static_cast<std::uint64_t>(s) + n), how);
  if (exact != nullptr) *exact = *exact || t.exact_seen;
}

}  // namespace

TEST_CASE("tagc flow: shard of an element without a 64-bit division") {
  test::sketch::splitmix r(5);
  for (std::uint64_t size : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{32}, std::uint64_t{1000003}, std::uint64_t{4294967295u}}) {
    td::context c;
    c.shard_size = size;
    c.inv_shard = 1.0 / static_cast<double>(size);
    for (int k = 0; k < 20000; ++k) {
      const std::uint64_t j = k < 64 ? static_cast<std::uint64_t>(k) * size + (k % 3 == 0 ? 0 : size - 1) : r.next() % (size * 64);
      CHECK(c.shard(j) == j / size);
    }
  }
}

TEST_CASE("tagc flow: every phase equals the host codec's, step after step") {
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe})
    for (summable::wire_type cells : {summable::wire_type::bf16, summable::wire_type::f32})
      for (std::uint32_t world : {2u, 3u, 8u}) {
        CAPTURE(static_cast<int>(mode));
        CAPTURE(static_cast<int>(cells));
        CAPTURE(world);
        gt::config c;
        c.bitmap = mode;
        c.cells = cells;
        c.block = 16;
        run_case(c, 30011, world, grads::wide, collective::reduce_scatter, 3);
        run_case(c, 20003, world, grads::dyadic, collective::all_reduce, 2);
        run_case(c, 20011, world, grads::lanes, collective::reduce_scatter, 2);  // r from the fullest lane
      }
}

TEST_CASE("tagc flow: presets, the dgc rule, bounded peels and partial peels") {
  gt::config low = gt::config{};
  low.cells_per_item = 0.9;  // too few cells: many items stay unpeeled
  low.max_rounds = 2;        // and the rounds are cut short
  gt::config dgc = gt::config{};
  dgc.select.estimate = sparsify::threshold::rule::dgc;
  dgc.select.max_tries = 1;
  dgc.block = 1;
  gt::config wide_block = gt::preset_v1();
  wide_block.block = 256;
  for (const gt::config& c : {gt::preset_tagc2(), gt::preset_v1(), low, dgc, wide_block}) {
    CAPTURE(c.block);
    run_case(c, 50021, 4, grads::wide, collective::reduce_scatter, 3);
    run_case(c, 50021, 4, grads::special, collective::all_reduce, 2);
  }
}

TEST_CASE("tagc flow: the exact top-k, its ties cut by index, and sparse gradients") {
  bool exact = false;
  for (unsigned tries : {1u, 3u}) {
    gt::config c;
    c.select.max_tries = tries;
    c.bitmap = gt::bitmap_mode::sum_safe;
    run_case(c, 40009, 4, grads::tied, collective::reduce_scatter, 3, gradcomp::tagc::sketch_layout::packed, &exact);
    run_case(c, 40009, 4, grads::sparse, collective::reduce_scatter, 3, gradcomp::tagc::sketch_layout::packed, &exact);
  }
  CHECK(exact);  // the exact path ran (and matched)
}

TEST_CASE("tagc flow: tiny, empty and keep-everything shards") {
  gt::config all;
  all.select.density = 1.0;  // k = n: every position kept
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{37}, std::size_t{1000}}) {
    CAPTURE(n);
    run_case(gt::config{}, n, 8, grads::wide, collective::reduce_scatter, 2);
    run_case(all, n, 3, grads::special, collective::all_reduce, 2);
  }
}

TEST_CASE("tagc flow: the padded sketch layout carries the same cells") {
  for (summable::wire_type cells : {summable::wire_type::bf16, summable::wire_type::f32}) {
    gt::config c;
    c.cells = cells;
    run_case(c, 30011, 4, grads::wide, collective::reduce_scatter, 2, gradcomp::tagc::sketch_layout::padded);
    run_case(c, 30011, 3, grads::dyadic, collective::all_reduce, 2, gradcomp::tagc::sketch_layout::padded);
    c.block = 16;
    run_case(c, 30011, 4, grads::lanes, collective::reduce_scatter, 2, gradcomp::tagc::sketch_layout::padded);
  }
}
