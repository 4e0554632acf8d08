// Summable phases and the single-phase summable codecs (casts, random-k with a shared seed):
// phase descriptions, the gather/summable trait, sums through all-reduce and reduce-scatter
// for W = 1..8, error-feedback conservation, malformed buffers.
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/summable/values.hpp>
#include <gradcomp/tagc.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sketch/support.hpp"
#include "summable/collective.hpp"

using namespace gradcomp;
using gradcomp::test::collective;
using gradcomp::test::sketch::dyadic_values;
using gradcomp::test::sketch::wide_values;

namespace {

using topk_frames = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
using scaled_frames = compressor<partition::whole, sparsify::dense, quantize::int_block<8>, feedback::none>;

static_assert(summable::is_summable_v<summable::cast<quantize::bf16>>);
static_assert(summable::is_summable_v<summable::random_k<quantize::none>>);
static_assert(summable::is_summable_v<tagc::codec>);
static_assert(summable::summable_codec<summable::cast<quantize::fp16>>);
static_assert(summable::summable_codec<summable::random_k<quantize::bf16>>);
static_assert(summable::summable_codec<tagc::codec>);
static_assert(!summable::is_summable_v<topk_frames>, "top-k frames carry per-rank indices: gather only");
static_assert(!summable::is_summable_v<scaled_frames>, "int8 blocks carry per-rank scales: gather only");
static_assert(summable::aggregation_of_v<topk_frames> == summable::aggregation::gather);

std::vector<std::vector<float>> rank_grads(std::size_t n, std::uint32_t world, bool exact) {
  std::vector<std::vector<float>> g;
  for (std::uint32_t r = 0; r < world; ++r) g.push_back(exact ? dyadic_values(n, 10 + r) : wide_values(n, 10 + r));
  return g;
}

}  // namespace

TEST_CASE("summable phases: shards, sizes, classification") {
  CHECK(summable::shard_size(10, 4) == 3);
  CHECK(summable::shard_of(10, 4, 0) == chunk_range{0, 3});
  CHECK(summable::shard_of(10, 4, 3) == chunk_range{9, 1});
  CHECK(summable::shard_of(2, 4, 3) == chunk_range{2, 0});  // shards past n are empty
  CHECK(summable::wire_bytes(summable::wire_type::bf16) == 2);
  CHECK(summable::wire_bytes(summable::wire_type::u32) == 4);
  const summable::phase p{"values", summable::wire_type::bf16, summable::reduction::sum, 12, 4, true, 0};
  CHECK(p.bytes() == 24);
  CHECK(p.shard_bytes() == 6);
  CHECK(*summable::classify(p, 24) == summable::received::whole);
  CHECK(*summable::classify(p, 6) == summable::received::shard);
  CHECK(summable::classify(p, 8).code() == errc::size_mismatch);
  summable::phase q = p;
  q.shardable = false;
  CHECK(summable::classify(q, 6).code() == errc::size_mismatch);
  CHECK(std::string(summable::to_string(summable::reduction::bitwise_or)) == "bitwise or");
  CHECK(std::string(summable::to_string(summable::wire_type::f16)) == "f16");
}

TEST_CASE("summable cast: one SUM phase, the reference sum through all-reduce and reduce-scatter") {
  const std::size_t n = 1003;
  for (std::uint32_t world : {1u, 2u, 3u, 4u, 8u}) {
    const auto g = rank_grads(n, world, true);
    std::vector<float> ref(n, 0.0f);
    for (const auto& x : g)
      for (std::size_t j = 0; j < n; ++j) ref[j] += x[j];
    const summable::cast<quantize::none> fp32;
    std::vector<summable::rank_state> st;
    for (std::uint32_t r = 0; r < world; ++r) st.push_back(fp32.make_state(n, world, r));
    const auto p = fp32.describe(0, st[0]);
    REQUIRE(p.ok());
    CHECK(p->type == summable::wire_type::f32);
    CHECK(p->op == summable::reduction::sum);
    CHECK(p->shardable);
    CHECK(p->count == world * summable::shard_size(n, world));
    for (collective how : {collective::all_reduce, collective::reduce_scatter}) {
      std::vector<std::vector<float>> outs;
      REQUIRE(test::run_ranks(fp32, st, g, how, outs).ok());
      for (std::uint32_t r = 0; r < world; ++r) {
        const chunk_range mine = how == collective::all_reduce ? chunk_range{0, n} : summable::shard_of(n, world, r);
        REQUIRE(outs[r].size() == mine.count);
        for (std::size_t i = 0; i < mine.count; ++i) CHECK(outs[r][i] == ref[mine.offset + i]);  // dyadic: exact
      }
    }
  }
}

TEST_CASE("summable cast: bf16 and fp16 keep their rounding as residual, exactly") {
  const std::size_t n = 777;
  const auto g = rank_grads(n, 3, false);
  const auto check = [&](const auto& codec, auto decode_code) {
    std::vector<summable::rank_state> st;
    for (std::uint32_t r = 0; r < 3; ++r) st.push_back(codec.make_state(n, 3, r));
    std::vector<std::vector<float>> outs;
    std::vector<std::vector<test::bytes>> sent;
    for (int step = 0; step < 2; ++step) {
      const auto before = st;
      REQUIRE(test::run_ranks(codec, st, g, collective::all_reduce, outs, &sent).ok());
      double err = 0, norm = 0;
      for (std::uint32_t r = 0; r < 3; ++r)
        for (std::size_t j = 0; j < n; ++j) {
          const float x = g[r][j] + before[r].residual[j];
          const float s = decode_code(sent[0][r], j);
          CHECK(s + st[r].residual[j] == x);  // sent + e' == g + e
        }
      for (std::size_t j = 0; j < n; ++j) {
        float want = 0.0f;
        for (std::uint32_t r = 0; r < 3; ++r) want += decode_code(sent[0][r], j);
        err += (outs[0][j] - want) * (outs[0][j] - want);
        norm += want * want;
      }
      CHECK(std::sqrt(err / norm) < 1e-2);  // the transport's own rounding of partial sums
    }
  };
  check(summable::cast<quantize::bf16>{}, [](const test::bytes& b, std::size_t j) { return test::load_at<bf16_t>(b, j).to_float(); });
  check(summable::cast<quantize::fp16>{}, [](const test::bytes& b, std::size_t j) { return test::load_at<fp16_t>(b, j).to_float(); });
}

TEST_CASE("summable random-k: every rank sends the same positions, receivers get their sum") {
  const std::size_t n = 5000;
  for (std::uint32_t world : {2u, 3u, 4u, 8u}) {
    const auto g = rank_grads(n, world, true);
    const summable::random_k<quantize::none> rk({.density = 0.05, .feedback = true, .seed = 9});
    std::vector<summable::rank_state> st;
    for (std::uint32_t r = 0; r < world; ++r) st.push_back(rk.make_state(n, world, r));
    const std::size_t k = rk.per_shard(st[0]);
    CHECK(rk.describe(0, st[0])->count == world * k);
    std::vector<std::vector<float>> outs, whole;
    REQUIRE(test::run_ranks(rk, st, g, collective::reduce_scatter, outs).ok());
    std::size_t sent_positions = 0;
    for (std::uint32_t r = 0; r < world; ++r) {
      const chunk_range mine = summable::shard_of(n, world, r);
      for (std::size_t i = 0; i < mine.count; ++i) {
        const std::size_t j = mine.offset + i;
        float ref = 0.0f;
        bool sent_j = true;
        for (std::uint32_t q = 0; q < world; ++q) {
          ref += g[q][j];
          sent_j = sent_j && st[q].residual[j] == 0.0f;  // fp32: a sent value leaves nothing
        }
        if (sent_j && g[0][j] != 0.0f) {
          CHECK(outs[r][i] == ref);
          ++sent_positions;
        } else {
          CHECK(outs[r][i] == 0.0f);
          for (std::uint32_t q = 0; q < world; ++q) CHECK(st[q].residual[j] == g[q][j]);
        }
      }
    }
    CHECK(sent_positions <= world * k);
    CHECK(sent_positions >= world * k - world);  // the last shard's padding positions send 0
    // The next step draws other positions (key = seed, step).
    REQUIRE(test::run_ranks(rk, st, g, collective::all_reduce, whole).ok());
    CHECK(whole[0] == whole[world - 1]);
  }
}

TEST_CASE("summable values: malformed buffers and calls are refused, outputs untouched") {
  const std::size_t n = 99;  // shards of 25: one padding element
  const summable::cast<quantize::bf16> c;
  auto st = c.make_state(n, 4, 1);
  const std::vector<float> g(n, 1.5f);
  std::vector<std::byte> buf(c.describe(0, st)->bytes());
  CHECK(c.describe(1, st).code() == errc::invalid_argument);
  CHECK(c.encode(0, std::vector<float>(n + 1), st, buf) == errc::size_mismatch);
  CHECK(c.encode(0, g, st, std::span<std::byte>(buf).first(10)) == errc::size_mismatch);
  REQUIRE(c.encode(0, g, st, buf).ok());
  std::vector<float> out(25, -3.0f), whole(n, -3.0f);
  CHECK(c.receive(0, st, std::span<const std::byte>(buf).first(48), out) == errc::size_mismatch);  // not a shard
  CHECK(c.receive(0, st, std::span<const std::byte>(buf).first(50), std::span<float>(out).first(24)) == errc::size_mismatch);
  test::store_at<std::uint16_t>(buf, n, 1);  // padding past n
  CHECK(c.receive(0, st, buf, whole) == errc::index_out_of_range);
  CHECK(whole == std::vector<float>(n, -3.0f));
  summable::rank_state bad = st;
  bad.rank = 4;
  CHECK(c.describe(0, bad).code() == errc::invalid_argument);
  bad = st;
  bad.residual.resize(3);
  CHECK(c.encode(0, g, bad, buf) == errc::size_mismatch);
  CHECK(out == std::vector<float>(25, -3.0f));

  const summable::random_k<quantize::bf16> rk({.density = 0.0});
  CHECK(rk.validate() == errc::invalid_argument);
  CHECK(rk.describe(0, rk.make_state(n, 1, 0)).code() == errc::invalid_argument);
  const summable::random_k<quantize::bf16> rk2({.density = 1.0});
  auto st2 = rk2.make_state(n, 4, 0);  // shards of 25, the last one 24: it sends one padding value
  std::vector<std::byte> b2(rk2.describe(0, st2)->bytes(), std::byte{0x11});
  std::vector<float> o2(n, -3.0f);
  CHECK(rk2.receive(0, st2, b2, o2) == errc::index_out_of_range);  // padding positions carry values
  CHECK(o2 == std::vector<float>(n, -3.0f));
}

TEST_CASE("summable run_step: one call per step with the caller's transport") {
  const std::size_t n = 64;
  const summable::cast<quantize::none> c;
  auto st = c.make_state(n, 1, 0);
  std::vector<float> g(n), out(n, 0.0f);
  for (std::size_t j = 0; j < n; ++j) g[j] = static_cast<float>(j) * 0.25f;
  std::vector<std::byte> send(c.describe(0, st)->bytes()), recv(send.size());
  std::size_t calls = 0;
  const auto loopback = [&](const summable::phase& p, std::span<const std::byte> s, std::span<std::byte> r) -> result<std::size_t> {
    ++calls;
    CHECK(p.bytes() == s.size());
    std::copy(s.begin(), s.end(), r.begin());
    return s.size();
  };
  REQUIRE(summable::run_step(c, st, g, loopback, send, recv, out).ok());
  CHECK(calls == 1);
  CHECK(out == g);
  CHECK(st.step == 1);
  CHECK(summable::run_step(c, st, g, loopback, std::span<std::byte>(send).first(4), recv, out) == errc::buffer_too_small);

  // The two-phase TAGC codec through the same call (one rank: the reductions are copies).
  const tagc::codec t;
  tagc::state ts;
  REQUIRE(t.make_state(n, 1, 0, ts).ok());
  std::vector<std::byte> tsend(t.max_phase_bytes(ts)), trecv(tsend.size());
  std::vector<float> tout(n, -1.0f);
  calls = 0;
  REQUIRE(summable::run_step(t, ts, g, loopback, tsend, trecv, tout).ok());
  CHECK(calls == 2);
  CHECK(ts.step == 1);
  for (std::size_t j = 0; j < n; ++j) CHECK(tout[j] + ts.residual[j] == g[j]);  // delivered + owed
}
