// The sharded path on the GPU (cuda/sharded.cuh) against sharded::codec on the CPU, on W
// simulated ranks: the send slots byte for byte, the reduced shards and the all-reduce
// outputs bit for bit, over steps; a bad slot reported with the CPU's errc and the output
// untouched. Host-side argument checks run without a GPU.
#include <gradcomp/cuda/sharded.cuh>

#include "support.cuh"

#include <gradcomp/sharded.hpp>

#include <cstring>
#include <memory>
#include <vector>

namespace {

using namespace gctest;
namespace sh = gradcomp::sharded;
namespace csh = gradcomp::cuda::sharded;
using bytes = std::vector<std::byte>;

using int8_ef = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::int_block<8>, gc::feedback::residual>;
using topk_ef = gc::compressor<gc::partition::chunks, gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual>;

bytes download_bytes(const device_bytes& d, std::size_t n) { return download<std::byte>(d, n); }

// W ranks, each on the CPU and on the GPU, stepped side by side.
template <class C>
struct twins {
  sh::codec<C> host;
  csh::codec<C> dev;
  std::vector<typename sh::codec<C>::state> hs;
  std::vector<typename csh::codec<C>::state> ds;
  std::vector<std::unique_ptr<device_bytes>> memory, workspace;
  std::size_t n;
  std::uint32_t world;

  twins(const C& comp, sh::mode m, std::size_t n_, std::uint32_t w)
      : host(comp, m), dev(comp, m), hs(w), ds(w), n(n_), world(w) {
    for (std::uint32_t r = 0; r < w; ++r) {
      REQUIRE(host.make_state(n, w, r, hs[r]).ok());
      memory.push_back(std::make_unique<device_bytes>(dev.state_bytes(n, w, r)));
      workspace.push_back(std::make_unique<device_bytes>(dev.template workspace_bytes<float>(n, w)));
      REQUIRE(dev.make_state(memory.back()->span(), n, w, r, ds[r]).ok());
    }
  }
  gcu::executor ex(std::uint32_t r) const { return {nullptr, workspace[r]->span()}; }

  // One step; `damage` may change rank 1's received bytes of phase 0 before both receive them.
  void step(const std::vector<std::vector<float>>& g, void (*damage)(bytes&) = nullptr) {
    const bool all_reduce = host.get_mode() == sh::mode::all_reduce;
    const auto p0 = *host.describe(0, hs[0]);
    std::vector<bytes> hsend(world, bytes(p0.send_bytes()));
    std::vector<std::unique_ptr<device_bytes>> dgrad, dsend;
    for (std::uint32_t r = 0; r < world; ++r) {
      REQUIRE(host.template encode<float>(0, g[r], hs[r], hsend[r]).ok());
      dgrad.push_back(std::make_unique<device_bytes>(4 * n));
      upload(*dgrad.back(), g[r]);
      dsend.push_back(std::make_unique<device_bytes>(p0.send_bytes()));
      REQUIRE(dev.template encode<float>(ex(r), 0, std::span<const float>(dgrad.back()->template as<float>(), n), ds[r], dsend.back()->span()).ok());
      CHECK(download_bytes(*dsend.back(), p0.send_bytes()) == hsend[r]);
    }
    for (std::uint32_t to = 0; to < world; ++to) {
      bytes in(p0.receive_bytes());
      for (std::uint32_t from = 0; from < world; ++from)
        std::memcpy(in.data() + from * p0.slot_bytes, hsend[from].data() + to * p0.slot_bytes, p0.slot_bytes);
      if (damage != nullptr && to == 1) damage(in);
      device_bytes din(in.size());
      upload(din, in);
      const std::size_t mine = gc::summable::shard_of(n, world, to).count;
      std::vector<float> hout(all_reduce ? 0 : mine, -5.0f);
      device_bytes dout(4 * hout.size());
      upload(dout, hout);
      const gc::status hs_ = host.template receive<float>(0, hs[to], in, std::span<float>(hout));
      REQUIRE(dev.template receive<float>(ex(to), 0, ds[to], din.span(), std::span<float>(dout.template as<float>(), hout.size())).ok());
      const auto rep = *dev.read_report(ds[to]);
      CHECK(static_cast<gc::errc>(rep.code) == hs_.code());
      CHECK(download<float>(dout, hout.size()) == hout);
      if (!hs_) return;  // (the CPU's stage stays; the GPU's moved on)
    }
    if (!all_reduce) return;
    const auto p1 = *host.describe(1, hs[0]);
    bytes all(p1.receive_bytes());
    for (std::uint32_t r = 0; r < world; ++r) {
      bytes h(p1.send_bytes());
      REQUIRE(host.template encode<float>(1, {}, hs[r], h).ok());
      device_bytes d(p1.send_bytes());
      REQUIRE(dev.template encode<float>(ex(r), 1, {}, ds[r], d.span()).ok());
      CHECK(download_bytes(d, p1.send_bytes()) == h);
      std::memcpy(all.data() + r * p1.slot_bytes, h.data(), p1.slot_bytes);
    }
    device_bytes dall(all.size());
    upload(dall, all);
    for (std::uint32_t r = 0; r < world; ++r) {
      std::vector<float> hout(n);
      device_bytes dout(4 * n);
      REQUIRE(host.template receive<float>(1, hs[r], all, std::span<float>(hout)).ok());
      REQUIRE(dev.template receive<float>(ex(r), 1, ds[r], dall.span(), std::span<float>(dout.template as<float>(), n)).ok());
      CHECK(download<float>(dout, n) == hout);
    }
  }
};

}  // namespace

TEST_CASE("sharded on the GPU: argument errors come back at once, before anything runs") {
  const csh::codec<int8_ef> dev(int8_ef{}, sh::mode::all_reduce);
  csh::codec<int8_ef>::state none;
  CHECK(dev.describe(0, none).code() == gc::errc::size_mismatch);
  CHECK(dev.encode<float>({}, 0, {}, none, {}) == gc::errc::size_mismatch);
  const csh::codec<int8_ef> bad(int8_ef{}, static_cast<sh::mode>(7));
  CHECK(bad.validate() == gc::errc::invalid_argument);
  CHECK(dev.state_bytes(1000, 4, 1) > 256);
  CHECK(dev.workspace_bytes<float>(1000, 4) > 0);
}

TEST_SUITE("gpu") {

TEST_CASE("sharded on the GPU: the CPU's slots and sums, byte for byte, over steps") {
  for (std::uint32_t world : {1u, 2u, 3u, 4u}) {
    CAPTURE(world);
    const std::size_t n = 20011;
    twins<int8_ef> a(int8_ef{}, sh::mode::all_reduce, n, world);
    auto cfg = topk_ef::config{};
    cfg.sparsify.density = 0.05;
    cfg.compact_indices = false;  // (the CUDA backend writes u32 index lists)
    twins<topk_ef> b(topk_ef(cfg), sh::mode::reduce_scatter, n, world);
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> g;
      for (std::uint32_t r = 0; r < world; ++r) g.push_back(gradient(n, 10 * step + r + 1));
      a.step(g);
      b.step(g);
    }
  }
}

TEST_CASE("sharded on the GPU: a bad slot gets the CPU's errc, the output untouched") {
  const std::size_t n = 9001;
  twins<int8_ef> t(int8_ef{}, sh::mode::reduce_scatter, n, 3);
  std::vector<std::vector<float>> g;
  for (std::uint32_t r = 0; r < 3; ++r) g.push_back(gradient(n, r + 1));
  t.step(g, [](bytes& in) { in[in.size() / 3 + 300] ^= std::byte{1}; });  // a frame of rank 1's slot
  twins<int8_ef> u(int8_ef{}, sh::mode::reduce_scatter, n, 3);
  u.step(g, [](bytes& in) { in.back() = std::byte{9}; });  // the last slot's padding
}

}  // TEST_SUITE("gpu")
