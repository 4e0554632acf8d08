#pragma once
// The host codec and the per-thread flow (tagc/flow.hpp, run by host_executor) on the
// same W simulated ranks, compared after every call: phase bytes, union, r, residuals,
// thresholds, decoded values, statistics.

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "tagc/host_executor.hpp"
#include "tagc/support.hpp"

namespace gradcomp::test::tagc {

using test::bytes;

inline std::vector<std::uint32_t> bits_of(const float* p, std::size_t n) {
  std::vector<std::uint32_t> b(n);
  if (n > 0) std::memcpy(b.data(), p, 4 * n);
  return b;
}
inline std::vector<std::uint32_t> bits_of(const std::vector<float>& v) { return bits_of(v.data(), v.size()); }

// Gradient kinds that reach every path of the threshold search.
enum class grads { wide, dyadic, sparse, tied, special, lanes };

inline std::vector<std::vector<float>> make_grads(grads kind, std::size_t n, std::uint32_t world, std::uint64_t seed) {
  if (kind == grads::wide || kind == grads::dyadic) return rank_grads(n, world, seed, kind == grads::dyadic);
  test::sketch::splitmix r(seed * 31 + 7);
  std::vector<std::vector<float>> g(world, std::vector<float>(n, 0.0f));
  for (auto& gr : g)
    for (std::size_t j = 0; j < n; ++j) {
      const double u = r.uniform();
      const float sign = (r.next() & 1) != 0 ? -1.0f : 1.0f;
      if (kind == grads::lanes) {
        gr[j] = sign * static_cast<float>(j % 16 < 2 ? 4.0 + u : u * 1e-3);  // kept positions in 2 lanes of 16
      } else if (kind == grads::sparse) {
        gr[j] = u < 0.004 ? sign * static_cast<float>(1.0 + u * 100) : 0.0f;  // fewer nonzeros than the target
      } else if (kind == grads::tied) {
        gr[j] = sign * (u < 0.5 ? 0.5f : 0.25f);  // no threshold count is accepted: exact top-k, ties by index
      } else {
        gr[j] = sign * static_cast<float>(u * 1e-3);
        if (j % 997 == 3) gr[j] = std::numeric_limits<float>::quiet_NaN();
        if (j % 1009 == 5) gr[j] = sign * std::numeric_limits<float>::infinity();
        if (j % 13 == 0) gr[j] = 0.0f;
      }
    }
  return g;
}

// The host codec and the per-thread flow on the same ranks.
struct twins {
  gt::codec host;
  td::flow dev;
  host_executor ex;
  std::vector<gt::state> hs;
  std::vector<model_rank> ms;
  bool exact_seen = false;

  twins(const gt::config& c, std::size_t n, std::uint32_t world, gradcomp::tagc::sketch_layout layout = gradcomp::tagc::sketch_layout::packed)
      : host(c), dev(c, layout) {
    hs = make_ranks(host, n, world);
    ms = make_model_ranks(dev, ex, n, world);
  }
  std::uint32_t world() const { return static_cast<std::uint32_t>(hs.size()); }
  std::size_t n() const { return hs[0].size; }
  gradcomp::tagc::step_report report(std::uint32_t r) { return *dev.read_report(ex, ms[r].st); }
  gt::state downloaded(std::uint32_t r) {
    gt::state h;
    REQUIRE(host.make_state(n(), world(), r, h).ok());
    REQUIRE(dev.download_state(ex, ms[r].st, h).ok());
    return h;
  }
  // The model's selection records (its workspace is host memory).
  void note_exact(std::uint32_t r) {
    const auto z = td::sizes_for(dev.get_config(), n(), world());
    td::work_view w;
    std::byte* t = nullptr;
    td::carve_work(*z, dev.get_config().max_rounds, 0, ms[r].workspace.data(), w, t);
    for (std::uint32_t i = 0; i < world(); ++i) exact_seen = exact_seen || w.sel[i].exact != 0;
  }
  void check_state(std::uint32_t r) {
    const gt::state d = downloaded(r);
    CHECK(bits_of(d.residual) == bits_of(hs[r].residual));
    CHECK(bits_of(d.thresholds) == bits_of(hs[r].thresholds));
    CHECK(d.step == hs[r].step);
    CHECK(d.key == hs[r].key);
  }

  void step(const std::vector<std::vector<float>>& g, collective how);
};

inline void twins::step(const std::vector<std::vector<float>>& g, collective how) {
  const std::uint32_t W = world();
  const bool padded = dev.layout() == gradcomp::tagc::sketch_layout::padded;
  // Phase 0.
  const auto p0 = host.describe(0, hs[0]);
  const auto q0 = dev.describe(0, ms[0].st);
  REQUIRE(p0.ok());
  REQUIRE(q0.ok());
  CHECK(q0->count == p0->count);
  CHECK(q0->op == p0->op);
  CHECK(q0->headroom_bits == p0->headroom_bits);
  std::vector<bytes> hsend(W, bytes(p0->bytes())), msend(W, bytes(p0->bytes(), std::byte{0x5a}));
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.encode(0, g[r], hs[r], hsend[r]).ok());
    REQUIRE(dev.encode_bitmap(ex, ms[r].workspace.span(), ms[r].st, g[r], msend[r]).ok());
    CHECK(msend[r] == hsend[r]);
    check_state(r);
    note_exact(r);
  }
  const bytes uni = test::reduce_all(*p0, hsend);
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.receive(0, hs[r], uni, {}).ok());
    REQUIRE(dev.receive_bitmap(ex, ms[r].workspace.span(), ms[r].st, uni).ok());
    const auto rep = report(r);
    CHECK(rep.code == 0);
    CHECK(rep.rows == hs[r].rows);
    CHECK(rep.sketch_cells == std::uint64_t{W} * hs[r].rows * host.get_config().block);
    CHECK(rep.union_items == gs::bitmap_popcount(hs[r].union_bits));
  }
  // Phase 1: the model writes the host's cells (packed: at the start of a larger buffer,
  // the rest untouched; padded: shard i at i R B, zeros after its r B cells).
  const auto p1 = host.describe(1, hs[0]);
  const auto q1 = dev.describe(1, ms[0].st);
  REQUIRE(p1.ok());
  REQUIRE(q1.ok());
  const std::size_t cb = p1->element_bytes(), per = p1->shard_bytes(), per_max = q1->shard_bytes();
  std::vector<bytes> hsend1(W, bytes(p1->bytes())), msend1(W, bytes(q1->bytes(), std::byte{0x5a}));
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.encode(1, g[r], hs[r], hsend1[r]).ok());
    REQUIRE(dev.encode_sketch(ex, ms[r].workspace.span(), ms[r].st, msend1[r]).ok());
    for (std::uint32_t i = 0; i < W; ++i) {
      const std::size_t at = padded ? i * per_max : i * per;
      CHECK(std::memcmp(msend1[r].data() + at, hsend1[r].data() + i * per, per) == 0);
      if (padded)
        for (std::size_t b = at + per; b < at + per_max; ++b) CHECK(msend1[r][b] == std::byte{0});
    }
    if (!padded)
      for (std::size_t b = p1->bytes(); b < q1->bytes(); b += cb) CHECK(msend1[r][b] == std::byte{0x5a});
    check_state(r);
    const auto rep = report(r);
    CHECK(rep.own.items == hs[r].own.items);
    CHECK(rep.own.peeled == hs[r].own.peeled);
    CHECK(rep.own.rounds == hs[r].own.rounds);
  }
  const bytes hwhole = test::reduce_all(*p1, hsend1);
  const bytes mwhole = padded ? test::reduce_all(*q1, msend1) : hwhole;
  for (std::uint32_t r = 0; r < W; ++r) {
    const bytes hgot = test::received_by(*p1, hwhole, r, how);
    const bytes mgot = padded ? test::received_by(*q1, mwhole, r, how) : hgot;
    const bool whole = how == collective::all_reduce;
    const std::size_t count = whole ? n() : summable::shard_of(n(), W, r).count;
    std::vector<float> hout(count, -9.0f), mout(count, -7.0f);
    REQUIRE(host.receive(1, hs[r], hgot, hout).ok());
    REQUIRE(dev.receive_sketch(ex, ms[r].workspace.span(), ms[r].st, mgot, whole ? summable::received::whole : summable::received::shard, mout)
                .ok());
    CHECK(bits_of(mout) == bits_of(hout));
    const auto rep = report(r);
    CHECK(rep.code == 0);
    CHECK(rep.stats.items == hs[r].stats.items);
    CHECK(rep.stats.peeled == hs[r].stats.peeled);
    CHECK(rep.stats.rounds == hs[r].stats.rounds);
    host.finish_step(hs[r]);
    REQUIRE(dev.finish_step(ex, ms[r].st).ok());
    check_state(r);
  }
}

}  // namespace gradcomp::test::tagc
