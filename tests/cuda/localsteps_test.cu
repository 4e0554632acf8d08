// Local steps on the GPU (cuda/localsteps.cuh) against localsteps::synchroniser over
// sharded::codec on the CPU, on W simulated ranks: every send buffer byte for byte and the
// parameters bit for bit after every apply, with fragments, overlap, mixing and Nesterov
// momentum; a bad slot reported with the CPU's errc and the parameters untouched. Host-side
// argument checks run without a GPU.
#include <gradcomp/cuda/localsteps.cuh>

#include "support.cuh"

#include <gradcomp/localsteps.hpp>
#include <gradcomp/sharded.hpp>

#include <cstring>
#include <memory>
#include <vector>

namespace {

using namespace gctest;
namespace ls = gradcomp::localsteps;
namespace cls = gradcomp::cuda::localsteps;
namespace sh = gradcomp::sharded;
using bytes = std::vector<std::byte>;
using int4_ef = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::int_block<4>, gc::feedback::residual>;

// What rank `to` receives of a sharded phase: all-to-all slots, or every rank's slot.
bytes delivered(const ls::exchange& x, const std::vector<bytes>& sent, std::uint32_t to) {
  const std::size_t w = sent.size();
  const bool to_all = x.op == ls::collective::all_to_all;
  const std::size_t slot = to_all ? x.send_bytes / w : x.send_bytes;
  bytes in(x.receive_bytes);
  for (std::size_t from = 0; from < w; ++from) std::memcpy(in.data() + from * slot, sent[from].data() + (to_all ? to * slot : 0), slot);
  return in;
}

// W ranks, each on the CPU and on the GPU, stepped side by side.
template <class C>
struct twins {
  ls::synchroniser<sh::codec<C>> host;
  cls::synchroniser<C> dev;
  std::vector<typename ls::synchroniser<sh::codec<C>>::state_type> hs;
  std::vector<cls::state> ds;
  std::vector<std::vector<float>> params;
  std::vector<std::unique_ptr<device_bytes>> dparams, memory, workspace;
  std::uint32_t world;

  twins(const ls::config& c, const C& comp, const std::vector<float>& init, std::uint32_t w)
      : host(c, sh::codec<C>(comp, sh::mode::all_reduce)), dev(c, comp), hs(w), ds(w), params(w, init), world(w) {
    const std::size_t n = init.size();
    for (std::uint32_t r = 0; r < w; ++r) {
      REQUIRE(host.make_state(init, w, r, hs[r]).ok());
      dparams.push_back(std::make_unique<device_bytes>(4 * n));
      upload(*dparams.back(), init);
      memory.push_back(std::make_unique<device_bytes>(dev.state_bytes(n, w, r)));
      workspace.push_back(std::make_unique<device_bytes>(dev.workspace_bytes(n, w)));
      REQUIRE(dev.make_state(memory.back()->span(), device_params(r), w, r, ds[r]).ok());
    }
  }
  std::span<float> device_params(std::uint32_t r) const { return {dparams[r]->template as<float>(), params[r].size()}; }
  gcu::executor ex(std::uint32_t r) const { return {nullptr, workspace[r]->span()}; }

  // An inner step on every replica (each rank its own gradient), on both sides.
  void inner_step(std::uint64_t seed) {
    for (std::uint32_t r = 0; r < world; ++r) {
      const std::vector<float> g = gradient(params[r].size(), seed * 31 + r);
      for (std::size_t j = 0; j < g.size(); ++j) params[r][j] -= 0.5f * g[j];
      upload(*dparams[r], params[r]);
      host.advance(hs[r]);
      dev.advance(ds[r]);
    }
  }

  // Fragment f's exchange: the GPU's send buffers against the CPU's, the CPU's bytes delivered
  // to both. `damage` may change rank 1's received bytes of the last phase.
  void exchange(std::size_t f, void (*damage)(bytes&) = nullptr) {
    for (std::size_t k = 0; k < host.phase_count(); ++k) {
      const ls::exchange p = *dev.describe(f, k, ds[0]);
      std::vector<bytes> sent(world, bytes(p.send_bytes));
      for (std::uint32_t r = 0; r < world; ++r) {
        const std::span<const float> hp = k == 0 ? std::span<const float>(params[r]) : std::span<const float>{};
        REQUIRE(host.encode(f, k, hp, hs[r], sent[r]).ok());
        device_bytes out(p.send_bytes);
        const std::span<const float> dp = k == 0 ? std::span<const float>(device_params(r)) : std::span<const float>{};
        REQUIRE(dev.encode(ex(r), f, k, dp, ds[r], out.span()).ok());
        CHECK(download<std::byte>(out, p.send_bytes) == sent[r]);
      }
      const bool last = k + 1 == host.phase_count();
      for (std::uint32_t r = 0; r < world; ++r) {
        bytes in = delivered(p, sent, r);
        if (damage != nullptr && last && r == 1) damage(in);
        device_bytes din(in.size());
        upload(din, in);
        const gc::status h = host.receive(f, k, hs[r], in);
        REQUIRE(dev.receive(ex(r), f, k, ds[r], din.span()).ok());
        if (last) CHECK(static_cast<gc::errc>(dev.read_report(f, ds[r])->code) == h.code());
        if (damage == nullptr) REQUIRE(h.ok());
      }
    }
  }

  // Fragment f applied on every rank; the GPU's parameters against the CPU's.
  void apply(std::size_t f) {
    for (std::uint32_t r = 0; r < world; ++r) {
      REQUIRE(host.apply(f, hs[r], params[r]).ok());
      REQUIRE(dev.apply(ex(r), f, ds[r], device_params(r)).ok());
      CHECK(same_bits(download<float>(*dparams[r], params[r].size()), params[r]));
    }
  }
};

std::vector<float> initial(std::size_t n) {
  std::vector<float> p = gradient(n, 99);
  for (float& v : p) v *= 100.0f;
  return p;
}

}  // namespace

TEST_CASE("local steps on the GPU: argument errors come back at once, before anything runs") {
  ls::config c;
  c.period = 4;
  c.fragments = 2;
  const cls::synchroniser<int4_ef> dev(c, int4_ef{});
  CHECK(dev.validate().ok());
  cls::state none;
  CHECK(dev.describe(0, 0, none).code() == gc::errc::invalid_argument);
  CHECK(dev.state_bytes(1000, 4, 1) > 4 * 1000 * 2);
  CHECK(dev.workspace_bytes(1000, 4) > 0);
  cls::state st;
  CHECK(dev.make_state({}, std::span<const float>(), 4, 1, st) == gc::errc::buffer_too_small);
  CHECK(dev.make_state({}, std::span<const float>(), 4, 4, st) == gc::errc::invalid_argument);
  c.overlap = 4;
  CHECK(cls::synchroniser<int4_ef>(c, int4_ef{}).validate() == gc::errc::invalid_argument);
}

TEST_SUITE("gpu") {

TEST_CASE("local steps on the GPU: the CPU's bytes and parameters, bit for bit, over syncs") {
  for (std::uint32_t world : {1u, 2u, 3u, 4u}) {
    CAPTURE(world);
    ls::config c;
    c.period = 4;
    c.fragments = 2;
    c.overlap = 1;
    c.mix = 0.25f;
    twins<int4_ef> t(c, int4_ef{}, initial(20011), world);
    for (std::uint64_t step = 0; step < 12; ++step) {
      t.inner_step(step);
      for (std::size_t f = 0; f < c.fragments; ++f) {
        if (t.dev.sends(t.ds[0], f)) t.exchange(f);
        if (t.dev.applies(t.ds[0], f)) t.apply(f);
      }
    }
    CHECK(t.hs[0].fragments[0].syncs == 3);
  }
}

TEST_CASE("local steps on the GPU: a bad slot gets the CPU's errc, the parameters untouched") {
  ls::config c;
  c.period = 2;
  twins<int4_ef> t(c, int4_ef{}, initial(9001), 3);
  t.inner_step(1);
  t.inner_step(2);
  t.exchange(0, [](bytes& in) { in[in.size() / 2] ^= std::byte{1}; });
  const std::vector<float> before = download<float>(*t.dparams[1], t.params[1].size());
  REQUIRE(t.dev.apply(t.ex(1), 0, t.ds[1], t.device_params(1)).ok());
  CHECK(same_bits(download<float>(*t.dparams[1], before.size()), before));
  CHECK(t.dev.read_report(0, t.ds[1])->code != 0);
}

}  // TEST_SUITE("gpu")
