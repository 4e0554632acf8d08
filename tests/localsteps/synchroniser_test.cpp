// Local steps (gradcomp/localsteps.hpp) on W simulated ranks over every aggregation path:
// the schedule covers every parameter once per period; H = 1, outer lr 1, no momentum and fp32
// equal data-parallel SGD; replicas bit-identical after every sync; the outer step against a
// plain reference; error-feedback conservation exact on dyadic values; bad input refused with
// the parameters and the state untouched.
#include <gradcomp/gather.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/localsteps/checkpoint.hpp>
#include <gradcomp/localsteps.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/random.hpp"

using namespace gradcomp;
namespace ls = gradcomp::localsteps;
using bytes = std::vector<std::byte>;

namespace {

using int4_ef = compressor<partition::chunks, sparsify::dense, quantize::int_block<4>, feedback::residual>;
using int8 = compressor<partition::chunks, sparsify::dense, quantize::int_block<8>, feedback::none>;
using topk_exact = compressor<partition::chunks, sparsify::topk, quantize::none, feedback::residual>;

// The transport between W ranks: what each rank receives for one phase.
std::vector<bytes> transport(const ls::exchange& x, const std::vector<bytes>& sent) {
  const std::size_t w = sent.size();
  std::vector<bytes> got(w, bytes(x.receive_bytes));
  for (std::size_t r = 0; r < w; ++r) {
    if (x.op == ls::collective::all_reduce) {
      REQUIRE(x.type == summable::wire_type::f32);
      std::vector<float> sum(x.send_bytes / 4, 0.0f);
      for (std::size_t s = 0; s < w; ++s)  // rank order
        for (std::size_t i = 0; i < sum.size(); ++i) {
          float v;
          std::memcpy(&v, sent[s].data() + 4 * i, 4);
          sum[i] += v;
        }
      std::memcpy(got[r].data(), sum.data(), x.receive_bytes);
    } else {
      const std::size_t slot = x.op == ls::collective::all_to_all ? x.send_bytes / w : x.send_bytes;
      for (std::size_t s = 0; s < w; ++s) {
        const std::byte* from = sent[s].data() + (x.op == ls::collective::all_to_all ? r * slot : 0);
        std::memcpy(got[r].data() + s * slot, from, slot);
      }
    }
  }
  return got;
}

// W replicas of a parameter vector under one synchroniser.
template <class Path>
struct replicas {
  ls::synchroniser<Path> sync;
  std::vector<typename ls::synchroniser<Path>::state_type> st;
  std::vector<std::vector<float>> params;

  replicas(const ls::config& c, const Path& p, const std::vector<float>& init, std::uint32_t world) : sync(c, p) {
    st.resize(world);
    params.assign(world, init);
    for (std::uint32_t r = 0; r < world; ++r) REQUIRE(sync.make_state(init, world, r, st[r]));
  }

  // One sync of fragment f: every phase through the transport; then the apply unless asked not to.
  void exchange(std::size_t f, bool apply = true) {
    const std::size_t w = st.size();
    for (std::size_t k = 0; k < sync.phase_count(); ++k) {
      std::vector<bytes> sent(w);
      ls::exchange x{};
      for (std::size_t r = 0; r < w; ++r) {
        const auto d = sync.describe(f, k, st[r]);
        REQUIRE(d);
        x = *d;
        sent[r].resize(x.send_bytes);
        REQUIRE(sync.encode(f, k, k == 0 ? std::span<const float>(params[r]) : std::span<const float>{}, st[r], sent[r]));
      }
      const std::vector<bytes> got = transport(x, sent);
      for (std::size_t r = 0; r < w; ++r) REQUIRE(sync.receive(f, k, st[r], got[r]));
    }
    if (apply)
      for (std::size_t r = 0; r < w; ++r) REQUIRE(sync.apply(f, st[r], params[r]));
  }

  // An inner SGD step on every replica: each rank its own gradient.
  void inner_step(float lr, std::uint32_t seed) {
    for (std::size_t r = 0; r < params.size(); ++r) {
      const std::vector<float> g = test::heavy_tailed(params[r].size(), seed * 977 + static_cast<std::uint32_t>(r), 1.0f);
      for (std::size_t j = 0; j < g.size(); ++j) params[r][j] -= lr * g[j];
    }
  }

  // The training loop: inner steps, and every fragment synced and applied when the schedule says;
  // counts the applies after which the fragment differed between replicas.
  std::size_t differing = 0;
  void train(std::size_t steps, float lr) {
    for (std::size_t t = 0; t < steps; ++t) {
      inner_step(lr, static_cast<std::uint32_t>(st[0].step));
      for (auto& s : st) sync.advance(s);
      for (std::size_t f = 0; f < sync.get_config().fragments; ++f) {
        if (sync.sends(st[0], f)) exchange(f, false);
        if (sync.applies(st[0], f)) {
          for (std::size_t r = 0; r < st.size(); ++r) REQUIRE(sync.apply(f, st[r], params[r]));
          const chunk_range at = sync.fragment(st[0], f);
          for (const auto& p : params)
            if (std::memcmp(p.data() + at.offset, params[0].data() + at.offset, 4 * at.count) != 0) ++differing;
        }
      }
    }
  }

  bool identical() const {
    for (const auto& p : params)
      if (std::memcmp(p.data(), params[0].data(), 4 * p.size()) != 0) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("local steps: the staggered schedule sends every parameter once per period") {
  for (const std::size_t fragments : {1, 2, 3, 4, 7}) {
    const ls::config c{.period = 21, .fragments = fragments, .overlap = 2};
    REQUIRE(ls::validate(c));
    const std::size_t n = 100;
    std::vector<int> sends_per_element(n, 0);
    for (std::uint64_t step = 1; step <= 3 * c.period; ++step) {
      std::size_t sending = 0;
      for (std::size_t f = 0; f < fragments; ++f) {
        const chunk_range r = ls::fragment_of(n, fragments, f);
        if (ls::sends_at(c, f, step)) {
          ++sending;
          for (std::size_t j = r.offset; j < r.offset + r.count; ++j) ++sends_per_element[j];
        }
        CHECK(ls::applies_at(c, f, step) == (step >= c.overlap + 1 && ls::sends_at(c, f, step - c.overlap)));
      }
      CHECK(sending <= 1);  // staggered: one fragment at a time (fragments <= period)
    }
    for (const int s : sends_per_element) CHECK(s == 3);  // three periods, once each
  }
  // The fragments partition the vector.
  std::size_t covered = 0;
  for (std::size_t f = 0; f < 3; ++f) {
    const chunk_range r = ls::fragment_of(10, 3, f);
    CHECK(r.offset == covered);
    covered += r.count;
  }
  CHECK(covered == 10);
}

TEST_CASE("local steps: bad configuration is refused with a reason") {
  CHECK(ls::validate({.period = 0}).code() == errc::invalid_argument);
  CHECK(ls::validate({.period = 4, .fragments = 5}).code() == errc::invalid_argument);
  CHECK(ls::validate({.period = 4, .fragments = 2, .overlap = 4}).code() == errc::invalid_argument);
  CHECK(ls::validate({.mix = 1.0f}).code() == errc::invalid_argument);
  CHECK(ls::validate({.outer_lr = 0.0f}).code() == errc::invalid_argument);
  CHECK(ls::validate({.momentum = 1.0f}).code() == errc::invalid_argument);
  // The sharded path must deliver the mean to every rank: all-reduce mode only.
  const ls::synchroniser sync(ls::config{}, sharded::codec<int8>(int8{}, sharded::mode::reduce_scatter));
  CHECK(sync.validate().code() == errc::invalid_argument);
}

TEST_CASE("local steps: H = 1, outer lr 1, no momentum and fp32 equal data-parallel SGD") {
  const std::uint32_t world = 3;
  const std::vector<float> init = test::heavy_tailed(257, 5, 1.0f);
  replicas reps(ls::config{.period = 1, .outer_lr = 1.0f, .momentum = 0.0f}, summable::cast<quantize::none>({.feedback = false}), init,
                world);
  std::vector<float> sgd = init;
  const float lr = 0.05f;
  for (std::uint32_t t = 0; t < 5; ++t) {
    reps.train(1, lr);  // (the replicas' gradients at step t are those below)
    for (std::size_t j = 0; j < sgd.size(); ++j) {
      double mean = 0;
      for (std::uint32_t r = 0; r < world; ++r) mean += test::heavy_tailed(sgd.size(), t * 977 + r, 1.0f)[j];
      sgd[j] -= static_cast<float>(lr * mean / world);
    }
    CHECK(reps.identical());
  }
  for (std::size_t j = 0; j < sgd.size(); ++j) CHECK(reps.params[0][j] == doctest::Approx(sgd[j]).epsilon(1e-5));
}

TEST_CASE("local steps: replicas are bit-identical after every sync, on every path") {
  const std::vector<float> init = test::heavy_tailed(1000, 9, 1.0f);
  const ls::config c{.period = 4, .fragments = 2, .outer_lr = 0.7f, .momentum = 0.9f};
  SUBCASE("summable fp32") {
    replicas reps(c, summable::cast<quantize::none>(), init, 4);
    reps.train(16, 0.01f);
    CHECK(reps.differing == 0);
  }
  SUBCASE("gather int4 + EF") {
    replicas reps(c, gather::codec<int4_ef>(int4_ef{}), init, 3);
    reps.train(16, 0.01f);
    CHECK(reps.differing == 0);
    CHECK(reps.st[0].fragments[0].syncs == 4);
    CHECK(reps.st[0].fragments[1].syncs == 4);
  }
  SUBCASE("sharded int8, all-reduce") {
    replicas reps(c, sharded::codec<int8>(int8{}, sharded::mode::all_reduce), init, 3);
    reps.train(16, 0.01f);
    CHECK(reps.differing == 0);
  }
  SUBCASE("streaming: overlap and mixing keep the fragments' anchors identical") {
    replicas reps(ls::config{.period = 6, .fragments = 3, .overlap = 1, .mix = 0.5f}, sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce),
                  init, 2);
    reps.train(19, 0.01f);
    for (std::size_t f = 0; f < 3; ++f) {
      CHECK(reps.st[0].fragments[f].syncs == 3);
      CHECK(std::memcmp(reps.st[0].fragments[f].anchor.data(), reps.st[1].fragments[f].anchor.data(), 4 * reps.st[0].fragments[f].anchor.size()) == 0);
    }
  }
}

TEST_CASE("local steps: the outer step is Nesterov momentum on the mean pseudo-gradient") {
  const std::vector<float> init{1.0f, -2.0f, 0.5f, 3.0f};
  const ls::config c{.period = 1, .outer_lr = 0.5f, .momentum = 0.75f, .nesterov = true};
  replicas reps(c, summable::cast<quantize::none>({.feedback = false}), init, 1);
  std::vector<double> anchor(init.begin(), init.end()), m(init.size(), 0.0);
  const std::vector<float> local1{0.5f, -1.0f, 0.25f, 2.0f}, local2{0.25f, -0.5f, 0.125f, 1.0f};
  for (const auto& local : {local1, local2}) {
    reps.params[0] = local;
    reps.exchange(0);
    for (std::size_t j = 0; j < init.size(); ++j) {
      const double d = anchor[j] - local[j];
      m[j] = 0.75 * m[j] + d;
      anchor[j] -= 0.5 * (d + 0.75 * m[j]);
      CHECK(reps.params[0][j] == doctest::Approx(anchor[j]).epsilon(1e-6));
      CHECK(reps.st[0].fragments[0].anchor[j] == reps.params[0][j]);
    }
  }
}

TEST_CASE("local steps: error feedback conserves what each rank owes, exactly on dyadic values") {
  // Top-k 25% with fp32 values and a residual: sent + kept == pseudo-gradient + old residual,
  // summed over the ranks. Dyadic parameters and W = 4 keep every sum and the division exact.
  const std::uint32_t world = 4;
  std::vector<float> init(64);
  for (std::size_t j = 0; j < init.size(); ++j) init[j] = static_cast<float>(static_cast<int>(j % 17) - 8) / 16.0f;
  using path = gather::codec<topk_exact>;
  replicas reps(ls::config{.period = 1, .outer_lr = 1.0f, .momentum = 0.0f}, path(topk_exact({.sparsify = {.density = 0.25}})), init, world);
  for (int round = 0; round < 3; ++round) {
    std::vector<double> owed(init.size(), 0.0);
    for (std::uint32_t r = 0; r < world; ++r) {
      for (std::size_t j = 0; j < init.size(); ++j) {
        reps.params[r][j] -= static_cast<float>((static_cast<int>((j * 7 + r * 3 + round) % 11) - 5)) / 64.0f;
        owed[j] += (reps.st[r].fragments[0].anchor[j] - reps.params[r][j]) / world + reps.st[r].fragments[0].path.compressor.residual[j];
      }
    }
    reps.exchange(0, false);
    for (std::size_t j = 0; j < init.size(); ++j) {
      double kept = 0;
      for (std::uint32_t r = 0; r < world; ++r) kept += reps.st[r].fragments[0].path.compressor.residual[j];
      CHECK(static_cast<double>(reps.st[0].fragments[0].values[j]) + kept == owed[j]);
    }
    for (std::uint32_t r = 0; r < world; ++r) REQUIRE(reps.sync.apply(0, reps.st[r], reps.params[r]));
  }
}

TEST_CASE("local steps: bad input leaves the parameters and the state untouched") {
  const std::vector<float> init = test::heavy_tailed(300, 3, 1.0f);
  replicas reps(ls::config{.period = 2}, gather::codec<int4_ef>(int4_ef{}), init, 2);
  // Out of order: apply or receive before encode.
  CHECK(reps.sync.apply(0, reps.st[0], reps.params[0]).code() == errc::invalid_argument);
  const auto x = reps.sync.describe(0, 0, reps.st[0]);
  REQUIRE(x);
  CHECK(reps.sync.receive(0, 0, reps.st[0], bytes(x->receive_bytes)).code() == errc::invalid_argument);
  CHECK(reps.sync.describe(1, 0, reps.st[0]).code() == errc::invalid_argument);  // no such fragment
  // A damaged received buffer: refused; the fragment keeps its state and can receive the good one.
  std::vector<bytes> sent(2, bytes(x->send_bytes));
  for (std::uint32_t r = 0; r < 2; ++r) REQUIRE(reps.sync.encode(0, 0, reps.params[r], reps.st[r], sent[r]));
  std::vector<bytes> got = transport(*x, sent);
  bytes bad = got[0];
  bad[x->send_bytes + sharded::slot_head_bytes + frame::header_bytes + 20] ^= std::byte{1};  // rank 1's frame body
  const auto before = reps.st[0].fragments[0];
  const std::vector<float> params_before = reps.params[0];
  CHECK(reps.sync.receive(0, 0, reps.st[0], bad).code() == errc::checksum_mismatch);
  CHECK(reps.sync.receive(0, 0, reps.st[0], bytes(got[0].begin(), got[0].end() - 8)).code() == errc::size_mismatch);
  CHECK(reps.st[0].fragments[0].pending == before.pending);
  CHECK(reps.st[0].fragments[0].anchor == before.anchor);
  CHECK(reps.params[0] == params_before);
  for (std::uint32_t r = 0; r < 2; ++r) REQUIRE(reps.sync.receive(0, 0, reps.st[r], got[r]));
  CHECK(reps.sync.apply(0, reps.st[0], std::span<float>(reps.params[0]).first(10)).code() == errc::size_mismatch);
  CHECK(reps.params[0] == params_before);
  for (std::uint32_t r = 0; r < 2; ++r) REQUIRE(reps.sync.apply(0, reps.st[r], reps.params[r]));
  CHECK(reps.identical());
}

TEST_CASE("local steps: eight simulated ranks stay identical on the sharded path") {
  const std::vector<float> init = test::heavy_tailed(4099, 21, 1.0f);
  replicas reps(ls::config{.period = 3, .outer_lr = 1.0f, .momentum = 0.0f}, sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce),
                init, 8);
  reps.train(9, 0.01f);
  CHECK(reps.differing == 0);
  CHECK(reps.identical());  // the last step synced the only fragment
}

TEST_CASE("local steps: a checkpoint resumes byte for byte, and a damaged one is refused") {
  const std::vector<float> init = test::heavy_tailed(777, 4, 1.0f);
  const ls::config c{.period = 3, .fragments = 3, .overlap = 1};
  const auto check_path = [&](auto path) {
    replicas a(c, path, init, 2);
    a.train(7, 0.01f);  // fragment 1 sent at step 2 was applied at 3; fragment 0 sent at 7 waits for step 8
    std::vector<std::vector<std::byte>> images;
    for (const auto& s : a.st) {
      const auto img = ls::save_checkpoint(a.sync, s);
      REQUIRE(img);
      images.push_back(*img);
    }
    replicas b(c, path, init, 2);
    b.params = a.params;
    for (std::size_t r = 0; r < 2; ++r) REQUIRE(ls::load_checkpoint(b.sync, images[r], b.st[r]));
    CHECK(b.st[0].step == 7);
    a.train(8, 0.01f);
    b.train(8, 0.01f);
    CHECK(a.params == b.params);
    CHECK(a.differing == 0);
    // Damaged, truncated, or another rank's image: refused, the state unchanged.
    replicas fresh(c, path, init, 2);
    const auto before = fresh.st[0].fragments[1].anchor;
    std::vector<std::byte> bad = images[0];
    bad[bad.size() / 2] ^= std::byte{4};
    CHECK(ls::load_checkpoint(fresh.sync, bad, fresh.st[0]).code() == errc::checksum_mismatch);
    CHECK(ls::load_checkpoint(fresh.sync, std::span(images[0]).first(20), fresh.st[0]).code() == errc::truncated);
    CHECK(ls::load_checkpoint(fresh.sync, images[1], fresh.st[0]).code() == errc::size_mismatch);
    CHECK(fresh.st[0].step == 0);
    CHECK(fresh.st[0].fragments[1].anchor == before);
  };
  SUBCASE("sharded") { check_path(sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce)); }
  SUBCASE("gather") { check_path(gather::codec<int4_ef>(int4_ef{})); }
  SUBCASE("summable") { check_path(summable::cast<quantize::none>()); }
}

TEST_CASE("local steps: bf16 parameters sync as their fp32 values do, and are written rounded") {
  // Every rank's bf16 parameters and the fp32 run whose parameters are those values widened:
  // the same bytes on the wire, the same anchors, and bf16 parameters = the fp32 ones rounded.
  const std::uint32_t world = 3;
  const std::size_t n = 777;
  const ls::config c{.period = 2, .fragments = 2, .outer_lr = 0.7f, .momentum = 0.9f};
  const ls::synchroniser sync(c, sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce));
  using state_type = decltype(sync)::state_type;
  std::vector<std::vector<bf16_t>> half(world);
  std::vector<std::vector<float>> wide(world);
  std::vector<state_type> sh(world), sw(world);
  const std::vector<float> init = test::heavy_tailed(n, 3, 1.0f);
  for (std::uint32_t r = 0; r < world; ++r) {
    for (const float v : init) half[r].push_back(bf16_t::from_float(v));
    for (const bf16_t v : half[r]) wide[r].push_back(v.to_float());
    REQUIRE(sync.make_state(std::span<const bf16_t>(half[r]), world, r, sh[r]));
    REQUIRE(sync.make_state(std::span<const float>(wide[r]), world, r, sw[r]));
  }
  for (std::uint32_t step = 1; step <= 8; ++step) {
    for (std::uint32_t r = 0; r < world; ++r) {  // an inner step, the same values on both sides
      const std::vector<float> g = test::heavy_tailed(n, step * 7 + r, 0.1f);
      for (std::size_t j = 0; j < n; ++j) {
        half[r][j] = bf16_t::from_float(half[r][j].to_float() - g[j]);
        wide[r][j] = half[r][j].to_float();
      }
      sync.advance(sh[r]);
      sync.advance(sw[r]);
    }
    for (std::size_t f = 0; f < c.fragments; ++f) {
      if (!sync.sends(sh[0], f)) continue;
      for (std::size_t k = 0; k < sync.phase_count(); ++k) {
        const ls::exchange x = *sync.describe(f, k, sh[0]);
        std::vector<bytes> from_half(world, bytes(x.send_bytes)), from_wide(world, bytes(x.send_bytes));
        for (std::uint32_t r = 0; r < world; ++r) {
          const bool first = k == 0;
          REQUIRE(sync.encode(f, k, first ? std::span<const bf16_t>(half[r]) : std::span<const bf16_t>{}, sh[r], from_half[r]));
          REQUIRE(sync.encode(f, k, first ? std::span<const float>(wide[r]) : std::span<const float>{}, sw[r], from_wide[r]));
          CHECK(from_half[r] == from_wide[r]);
        }
        const std::vector<bytes> got = transport(x, from_wide);
        for (std::uint32_t r = 0; r < world; ++r) {
          REQUIRE(sync.receive(f, k, sh[r], got[r]));
          REQUIRE(sync.receive(f, k, sw[r], got[r]));
        }
      }
      for (std::uint32_t r = 0; r < world; ++r) {
        REQUIRE(sync.apply(f, sh[r], std::span<bf16_t>(half[r])));
        REQUIRE(sync.apply(f, sw[r], std::span<float>(wide[r])));
        CHECK(sh[r].fragments[f].anchor == sw[r].fragments[f].anchor);
        const chunk_range at = sync.fragment(sh[r], f);
        for (std::size_t j = at.offset; j < at.offset + at.count; ++j) {
          CHECK(half[r][j] == bf16_t::from_float(wide[r][j]));
          wide[r][j] = half[r][j].to_float();  // the inner steps go on from the bf16 values
        }
      }
      const chunk_range at = sync.fragment(sh[0], f);  // the synced fragment: the same on every replica
      for (std::uint32_t r = 1; r < world; ++r)
        CHECK(std::memcmp(half[r].data() + at.offset, half[0].data() + at.offset, 2 * at.count) == 0);
    }
  }
  CHECK(sh[0].fragments[0].syncs == 4);
}

TEST_CASE("local steps: a fragment's own values and a caller's outer step give the same sync") {
  // Three replicas call encode_fragment / apply_fragment on copies of their fragments, three
  // others encode / apply on whole vectors, three more run their own outer step (anchor -= mean,
  // then the parameters take the anchor) and mark_applied: all nine end on the same bytes.
  const std::uint32_t world = 3;
  const std::vector<float> init = test::heavy_tailed(500, 8, 1.0f);
  const ls::config c{.period = 2, .fragments = 2, .outer_lr = 1.0f, .momentum = 0.0f};
  const ls::synchroniser sync(c, sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce));
  using state_type = decltype(sync)::state_type;
  std::vector<std::vector<float>> whole(world, init), parts(world, init), own(world, init);
  std::vector<state_type> sw(world), sp(world), so(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    for (float& v : whole[r]) v += 0.01f * static_cast<float>(r + 1);
    parts[r] = own[r] = whole[r];
    REQUIRE(sync.make_state(init, world, r, sw[r]));
    REQUIRE(sync.make_state(init, world, r, sp[r]));
    REQUIRE(sync.make_state(init, world, r, so[r]));
  }
  for (std::size_t f = 0; f < c.fragments; ++f) {
    const chunk_range at = sync.fragment(sw[0], f);
    for (std::size_t k = 0; k < sync.phase_count(); ++k) {
      const ls::exchange x = *sync.describe(f, k, sw[0]);
      std::vector<bytes> a(world, bytes(x.send_bytes)), b(world, bytes(x.send_bytes)), o(world, bytes(x.send_bytes));
      for (std::uint32_t r = 0; r < world; ++r) {
        const std::span<const float> all = k == 0 ? std::span<const float>(whole[r]) : std::span<const float>{};
        const std::span<const float> mine = k == 0 ? std::span<const float>(parts[r]).subspan(at.offset, at.count) : std::span<const float>{};
        REQUIRE(sync.encode(f, k, all, sw[r], a[r]));
        REQUIRE(sync.encode_fragment(f, k, mine, sp[r], b[r]));
        REQUIRE(sync.encode_fragment(f, k, mine, so[r], o[r]));
        CHECK(a[r] == b[r]);
      }
      const std::vector<bytes> got = transport(x, a);
      for (std::uint32_t r = 0; r < world; ++r) {
        REQUIRE(sync.receive(f, k, sw[r], got[r]));
        REQUIRE(sync.receive(f, k, sp[r], got[r]));
        REQUIRE(sync.receive(f, k, so[r], got[r]));
      }
    }
    for (std::uint32_t r = 0; r < world; ++r) {
      REQUIRE(sync.apply(f, sw[r], whole[r]));
      std::vector<float> mine(parts[r].begin() + static_cast<std::ptrdiff_t>(at.offset),
                              parts[r].begin() + static_cast<std::ptrdiff_t>(at.offset + at.count));
      REQUIRE(sync.apply_fragment(f, sp[r], std::span<float>(mine)));
      std::copy(mine.begin(), mine.end(), parts[r].begin() + static_cast<std::ptrdiff_t>(at.offset));
      auto& fs = so[r].fragments[f];  // the caller's outer step: plain averaging
      for (std::size_t j = 0; j < at.count; ++j) {
        fs.anchor[j] -= fs.values[j];
        own[r][at.offset + j] = fs.anchor[j];
      }
      REQUIRE(sync.mark_applied(f, so[r]));
      CHECK(sync.mark_applied(f, so[r]).code() == errc::invalid_argument);  // once per sync
    }
    CHECK(sync.apply_fragment(f, sp[0], std::span<float>(parts[0]).first(1)).code() == errc::invalid_argument);
  }
  for (std::uint32_t r = 0; r < world; ++r) {
    CHECK(whole[r] == whole[0]);
    CHECK(parts[r] == whole[0]);
    CHECK(own[r] == whole[0]);
  }
}

TEST_CASE("local steps: a checkpoint restores at another world size, keeping what error feedback owes") {
  // 4 ranks saved, restored into 3 and into 6: the anchors, momenta and step carry over, the
  // residuals' sum over the ranks is kept, and the new replicas train on identically.
  const std::vector<float> init = test::heavy_tailed(901, 6, 1.0f);
  const ls::config c{.period = 3, .fragments = 2, .overlap = 1};
  const auto owed_sum = [](const auto& reps, std::size_t f) {
    std::vector<double> sum;
    for (const auto& s : reps.st) {
      const auto& path = s.fragments[f].path;
      std::vector<float> r;
      if constexpr (requires { path.send; }) {  // sharded: the senders' residuals, shard by shard, and the owner's
        for (const auto& x : path.send) r.insert(r.end(), x.residual.begin(), x.residual.end());
      } else if constexpr (requires { path.compressor; }) {
        r = path.compressor.residual;
      } else {
        r = path.residual;
      }
      sum.resize(std::max(sum.size(), r.size()), 0.0);
      for (std::size_t j = 0; j < r.size(); ++j) sum[j] += r[j];
    }
    return sum;
  };
  const auto check_path = [&](auto path, bool sharded_path) {
    replicas a(c, path, init, 4);
    a.train(6, 0.01f);  // every fragment synced and applied: the replicas agree
    std::vector<std::vector<std::byte>> images;
    for (const auto& s : a.st) images.push_back(*ls::save_checkpoint(a.sync, s));
    const std::vector<std::span<const std::byte>> views(images.begin(), images.end());
    for (const std::uint32_t world : {3u, 6u}) {
      replicas b(c, path, init, world);
      for (std::uint32_t r = 0; r < world; ++r) {
        REQUIRE(ls::restore_elastic(b.sync, views, b.st[r]));
        b.params[r] = a.params[0];
        CHECK(b.st[r].step == a.st[0].step);
        for (std::size_t f = 0; f < c.fragments; ++f) CHECK(b.st[r].fragments[f].anchor == a.st[0].fragments[f].anchor);
      }
      if (!sharded_path)  // (the sharded path's own rule re-slices the shards: sharded/checkpoint.hpp's tests)
        for (std::size_t f = 0; f < c.fragments; ++f) {
          const auto before = owed_sum(a, f), after = owed_sum(b, f);
          REQUIRE(before.size() == after.size());
          for (std::size_t j = 0; j < before.size(); ++j) CHECK(after[j] == doctest::Approx(before[j]).epsilon(1e-6));
        }
      b.train(6, 0.01f);
      CHECK(b.differing == 0);
    }
    // A damaged image is refused with the state unchanged.
    replicas fresh(c, path, init, 2);
    std::vector<std::byte> bad = images[2];
    bad[bad.size() / 3] ^= std::byte{1};
    std::vector<std::span<const std::byte>> damaged = views;
    damaged[2] = bad;
    const auto before = fresh.st[1].fragments[0].anchor;
    CHECK(ls::restore_elastic(fresh.sync, damaged, fresh.st[1]).code() == errc::checksum_mismatch);
    CHECK(fresh.st[1].fragments[0].anchor == before);
    CHECK(fresh.st[1].step == 0);
  };
  SUBCASE("sharded") { check_path(sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce), true); }
  SUBCASE("gather") { check_path(gather::codec<int4_ef>(int4_ef{}), false); }
  SUBCASE("summable") { check_path(summable::cast<quantize::none>(), false); }
}
