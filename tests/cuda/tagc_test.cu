// The TAGC codec on the GPU (cuda/tagc.cuh) against tagc::codec on W simulated ranks, byte for
// byte: phase buffers, union size, residuals, thresholds, decoded values and statistics, over
// steps, both bitmap modes and cell types, both layouts, reduce-scatter and all-reduce, the
// exact top-k (ties, sparse gradients), every call also captured in a CUDA graph; data errors
// in the report with outputs untouched; checkpoints through download_state. Host-side
// argument checks run without a GPU.
#include <gradcomp/cuda/tagc.cuh>

#include "support.cuh"

#include <gradcomp/tagc/checkpoint.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "summable/collective.hpp"

namespace {

using namespace gctest;
namespace gt = gradcomp::tagc;
namespace gtc = gradcomp::cuda::tagc;
namespace sm = gradcomp::summable;
using bytes = std::vector<std::byte>;

std::vector<std::vector<float>> rank_grads(std::size_t n, std::uint32_t world, std::uint64_t seed) {
  std::vector<std::vector<float>> g(world);
  const auto shared = gradient(n, seed);
  for (std::uint32_t r = 0; r < world; ++r) {
    g[r] = gradient(n, seed * 100 + r + 1, r == 0);  // NaN and infinity on rank 0
    for (std::size_t j = 0; j < n; ++j) g[r][j] = g[r][j] + shared[j];
  }
  return g;
}

// Two magnitudes, half each: no threshold count is accepted, so every shard takes the exact
// top-k, its ties cut by index; and gradients that are zero but for a few (fewer than the target).
std::vector<std::vector<float>> hard_grads(std::size_t n, std::uint32_t world, std::uint64_t seed, bool sparse) {
  std::vector<std::vector<float>> g(world, std::vector<float>(n, 0.0f));
  rng r{seed * 977 + 1};
  for (auto& gr : g)
    for (auto& v : gr) {
      const float u = r.uniform(), sign = (r.next() & 1) != 0 ? -1.0f : 1.0f;
      v = sparse ? (u < 0.004f ? sign * (1.0f + u) : 0.0f) : sign * (u < 0.5f ? 0.5f : 0.25f);
    }
  return g;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), 4 * v.size());
  return b;
}

struct gpu_rank {
  std::unique_ptr<device_bytes> memory, workspace;
  gtc::device_state st;
};

// The host codec and the GPU codec on the same ranks; every call optionally as a graph.
struct twins {
  gt::codec host;
  gtc::codec dev;
  std::vector<gt::state> hs;
  std::vector<gpu_rank> gs;
  cudaStream_t stream = nullptr;
  bool graphs = false;

  twins(const gt::config& c, std::size_t n, std::uint32_t world, gtc::sketch_layout layout, bool as_graphs)
      : host(c), dev(c, layout), hs(world), gs(world), graphs(as_graphs) {
    // A blocking stream: the helpers' cudaMemcpy (legacy stream) stay ordered with its work.
    GC_CUDA_CHECK(cudaStreamCreate(&stream));
    for (std::uint32_t r = 0; r < world; ++r) {
      REQUIRE(host.make_state(n, world, r, hs[r]).ok());
      gs[r].memory = std::make_unique<device_bytes>(*dev.state_bytes(n, world));
      gs[r].workspace = std::make_unique<device_bytes>(*dev.workspace_bytes(n, world));
      REQUIRE(dev.make_state(gs[r].memory->span(), n, world, r, gs[r].st, stream).ok());
    }
  }
  ~twins() { cudaStreamDestroy(stream); }
  gradcomp::cuda::executor ex(std::uint32_t r) const { return {stream, gs[r].workspace->span()}; }
  // Runs a call directly, or captured into a graph and launched; then waits.
  void run(const std::function<gc::status()>& call) {
    if (!graphs) {
      REQUIRE(call().ok());
    } else {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      GC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const gc::status s = call();
      GC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      REQUIRE(s.ok());
      GC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      GC_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    GC_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  gtc::step_report report(std::uint32_t r) { return *dev.read_report(gs[r].st, stream); }
  void check_state(std::uint32_t r) {
    gt::state d;
    REQUIRE(host.make_state(hs[r].size, hs[r].world, r, d).ok());
    REQUIRE(dev.download_state(gs[r].st, d, stream).ok());
    CHECK(bits(d.residual) == bits(hs[r].residual));
    CHECK(bits(d.thresholds) == bits(hs[r].thresholds));
    CHECK(d.step == hs[r].step);
  }
  void step(const std::vector<std::vector<float>>& g, gradcomp::test::collective how);
};

void twins::step(const std::vector<std::vector<float>>& g, gradcomp::test::collective how) {
  const auto W = static_cast<std::uint32_t>(hs.size());
  const std::size_t n = hs[0].size;
  const bool padded = dev.layout() == gtc::sketch_layout::padded;
  device_bytes d_grad(4 * n), d_out(4 * n);
  // Phase 0.
  const auto p0 = host.describe(0, hs[0]);
  REQUIRE(p0.ok());
  std::vector<bytes> hsend(W, bytes(p0->bytes()));
  device_bytes d_send(p0->bytes()), d_recv(p0->bytes());
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.encode(0, g[r], hs[r], hsend[r]).ok());
    upload(d_grad, g[r]);
    run([&] { return dev.encode_bitmap(ex(r), gs[r].st, {d_grad.as<float>(), n}, d_send.span()); });
    CHECK(download<std::byte>(d_send, p0->bytes()) == hsend[r]);
    check_state(r);
  }
  const bytes uni = gradcomp::test::reduce_all(*p0, hsend);
  upload(d_recv, uni);
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.receive(0, hs[r], uni, {}).ok());
    run([&] { return dev.receive_bitmap(ex(r), gs[r].st, {d_recv.data(), uni.size()}); });
    const auto rep = report(r);
    CHECK(rep.code == 0);
    CHECK(rep.rows == hs[r].rows);
  }
  // Phase 1.
  const auto p1 = host.describe(1, hs[0]);
  const auto q1 = dev.describe(1, gs[0].st);
  REQUIRE(p1.ok());
  REQUIRE(q1.ok());
  const std::size_t per = p1->shard_bytes(), per_max = q1->shard_bytes();
  std::vector<bytes> hsend1(W, bytes(p1->bytes())), dsend1(W);
  device_bytes d_cells(q1->bytes());
  for (std::uint32_t r = 0; r < W; ++r) {
    REQUIRE(host.encode(1, g[r], hs[r], hsend1[r]).ok());
    run([&] { return dev.encode_sketch(ex(r), gs[r].st, d_cells.span()); });
    dsend1[r] = download<std::byte>(d_cells, q1->bytes());
    for (std::uint32_t i = 0; i < W; ++i)
      CHECK(std::memcmp(dsend1[r].data() + (padded ? i * per_max : i * per), hsend1[r].data() + i * per, per) == 0);
    check_state(r);
    const auto rep = report(r);
    CHECK(rep.own.items == hs[r].own.items);
    CHECK(rep.own.peeled == hs[r].own.peeled);
    CHECK(rep.own.rounds == hs[r].own.rounds);
  }
  const bytes hwhole = gradcomp::test::reduce_all(*p1, hsend1);
  const bytes dwhole = padded ? gradcomp::test::reduce_all(*q1, dsend1) : hwhole;
  for (std::uint32_t r = 0; r < W; ++r) {
    const bool whole = how == gradcomp::test::collective::all_reduce;
    const bytes hgot = gradcomp::test::received_by(*p1, hwhole, r, how);
    const bytes dgot = padded ? gradcomp::test::received_by(*q1, dwhole, r, how) : hgot;
    const std::size_t count = whole ? n : sm::shard_of(n, W, r).count;
    std::vector<float> hout(count, -9.0f);
    REQUIRE(host.receive(1, hs[r], hgot, hout).ok());
    device_bytes d_in(dgot.size());
    upload(d_in, dgot);
    run([&] {
      return dev.receive_sketch(ex(r), gs[r].st, {d_in.data(), dgot.size()}, whole ? sm::received::whole : sm::received::shard,
                                {d_out.as<float>(), count});
    });
    CHECK(bits(download<float>(d_out, count)) == bits(hout));
    const auto rep = report(r);
    CHECK(rep.stats.items == hs[r].stats.items);
    CHECK(rep.stats.peeled == hs[r].stats.peeled);
    CHECK(rep.stats.rounds == hs[r].stats.rounds);
    host.finish_step(hs[r]);
    run([&] { return dev.finish_step(stream, gs[r].st); });
    check_state(r);
  }
}

}  // namespace

TEST_CASE("tagc on the GPU: argument errors come back at once, before anything runs") {
  gt::config cfg;
  const gtc::codec dev(cfg);
  const gt::codec host(cfg);
  gt::state h;
  REQUIRE(host.make_state(1000, 4, 1, h).ok());
  // A state as make_state would describe it (its memory is never touched by these calls).
  alignas(256) static std::byte fake[1024];
  gtc::device_state st;
  st.size = 1000;
  st.world = 4;
  st.rank = 1;
  st.codec_id = gt::codec_id(cfg);
  st.select_id = gt::select_fingerprint(cfg);
  st.v.report = reinterpret_cast<gtc::step_report*>(fake);
  st.v.residual = reinterpret_cast<float*>(fake);
  const auto p0 = dev.describe(0, st);
  REQUIRE(p0.ok());
  CHECK(p0->count == host.describe(0, h)->count);
  CHECK(dev.max_phase_bytes(st) == host.max_phase_bytes(h));
  CHECK(dev.describe(2, st).code() == gc::errc::invalid_argument);
  const gradcomp::cuda::executor ex{nullptr, {fake, 0}};
  std::vector<std::byte> out(p0->bytes());
  std::vector<float> grad(1000);
  CHECK(dev.encode_bitmap(ex, st, std::span<const float>(grad.data(), 999), out).code() == gc::errc::size_mismatch);
  CHECK(dev.encode_bitmap(ex, st, grad, std::span<std::byte>(out).first(out.size() - 4)).code() == gc::errc::size_mismatch);
  CHECK(dev.encode_bitmap(ex, st, grad, std::span<std::byte>(out.data() + 1, out.size())).code() == gc::errc::invalid_argument);
  CHECK(dev.receive_bitmap(ex, st, out).code() == gc::errc::invalid_argument);  // out of order
  CHECK(dev.encode_sketch(ex, st, out).code() == gc::errc::invalid_argument);
  gtc::device_state other = st;
  other.codec_id ^= 1;
  CHECK(dev.encode_bitmap(ex, other, grad, out).code() == gc::errc::codec_mismatch);
  other = st;
  other.rank = 4;
  CHECK(dev.describe(0, other).code() == gc::errc::invalid_argument);
  // The padded layout knows the sketch's size: a wrong one is refused on the host.
  const gtc::codec padded(cfg, gtc::sketch_layout::padded);
  gtc::device_state at1 = st;
  at1.at = gt::stage::encode_sketch;
  std::vector<std::byte> cells(padded.describe(1, at1)->bytes() - 2);
  CHECK(padded.encode_sketch(ex, at1, cells).code() == gc::errc::size_mismatch);
  CHECK(padded.state_bytes(1000, 0).code() == gc::errc::invalid_argument);
}

TEST_SUITE("gpu") {

TEST_CASE("tagc on the GPU: every phase equals the host codec's, step after step") {
  for (gt::bitmap_mode mode : {gt::bitmap_mode::bitwise_or, gt::bitmap_mode::sum_safe})
    for (sm::wire_type cells : {sm::wire_type::bf16, sm::wire_type::f32})
      for (std::uint32_t world : {2u, 4u, 8u}) {
        CAPTURE(static_cast<int>(mode));
        CAPTURE(static_cast<int>(cells));
        CAPTURE(world);
        gt::config c;
        c.bitmap = mode;
        c.cells = cells;
        twins t(c, 200003, world, gtc::sketch_layout::packed, false);
        for (int s = 0; s < 3; ++s)
          t.step(rank_grads(200003, world, 10 + static_cast<std::uint64_t>(s)),
                 s == 2 ? gradcomp::test::collective::all_reduce : gradcomp::test::collective::reduce_scatter);
      }
}

TEST_CASE("tagc on the GPU: presets, padded layout, tiny sizes, each call captured in a graph") {
  gt::config one_try;
  one_try.select.max_tries = 1;
  for (const gt::config& c : {gt::preset_tagc2(), gt::preset_v1(), one_try})
    for (std::size_t n : {std::size_t{5}, std::size_t{70001}})
      for (bool padded : {false, true}) {
        CAPTURE(n);
        CAPTURE(padded);
        twins t(c, n, 4, padded ? gtc::sketch_layout::padded : gtc::sketch_layout::packed, true);
        for (int s = 0; s < 2; ++s) t.step(rank_grads(n, 4, 50 + static_cast<std::uint64_t>(s)), gradcomp::test::collective::reduce_scatter);
      }
}

TEST_CASE("tagc on the GPU: the exact top-k with ties cut by index, and sparse gradients") {
  for (bool sparse : {false, true})
    for (unsigned tries : {1u, 3u}) {
      CAPTURE(sparse);
      CAPTURE(tries);
      gt::config c;
      c.select.max_tries = tries;
      twins t(c, 100003, 4, gtc::sketch_layout::packed, false);
      for (int s = 0; s < 2; ++s) t.step(hard_grads(100003, 4, 70 + static_cast<std::uint64_t>(s), sparse), gradcomp::test::collective::reduce_scatter);
    }
}

TEST_CASE("tagc on the GPU: a bad union is reported and stops the step, checkpoints match the host's") {
  gt::config c;
  c.bitmap = gt::bitmap_mode::sum_safe;
  const std::size_t n = 10007;
  twins t(c, n, 4, gtc::sketch_layout::packed, false);
  t.step(rank_grads(n, 4, 3), gradcomp::test::collective::reduce_scatter);
  // Checkpoints: the downloaded state saves the host's bytes.
  gt::state d;
  REQUIRE(t.host.make_state(n, 4, 0, d).ok());
  REQUIRE(t.dev.download_state(t.gs[0].st, d, t.stream).ok());
  std::vector<std::byte> a(gt::checkpoint_bytes(d)), b(gt::checkpoint_bytes(t.hs[0]));
  REQUIRE(gt::save_checkpoint(t.host, d, a).ok());
  REQUIRE(gt::save_checkpoint(t.host, t.hs[0], b).ok());
  CHECK(a == b);
  // A field above W in the sums: count_too_large, as on the host; nothing after it runs.
  const auto p0 = t.host.describe(0, t.hs[0]);
  device_bytes d_grad(4 * n), d_send(p0->bytes()), d_cells(t.dev.describe(1, t.gs[0].st)->bytes());
  const auto g = rank_grads(n, 4, 4);
  upload(d_grad, g[0]);
  REQUIRE(t.dev.encode_bitmap(t.ex(0), t.gs[0].st, {d_grad.as<float>(), n}, d_send.span()).ok());
  std::vector<std::uint32_t> sums(p0->count, 0u);
  sums[3] = 7u;  // W = 4: 3-bit fields, 7 > 4
  upload(d_send, sums);
  REQUIRE(t.dev.receive_bitmap(t.ex(0), t.gs[0].st, d_send.span()).ok());
  CHECK(t.report(0).code == static_cast<std::uint32_t>(gc::errc::count_too_large));
  gt::state before;
  REQUIRE(t.host.make_state(n, 4, 0, before).ok());
  REQUIRE(t.dev.download_state(t.gs[0].st, before, t.stream).ok());
  std::vector<std::byte> sentinel(d_cells.size(), std::byte{0x77});
  upload(d_cells, sentinel);
  REQUIRE(t.dev.encode_sketch(t.ex(0), t.gs[0].st, d_cells.span()).ok());
  CHECK(download<std::byte>(d_cells, sentinel.size()) == sentinel);
  gt::state after;
  REQUIRE(t.host.make_state(n, 4, 0, after).ok());
  REQUIRE(t.dev.download_state(t.gs[0].st, after, t.stream).ok());
  CHECK(bits(after.residual) == bits(before.residual));
  CHECK(t.report(0).code == static_cast<std::uint32_t>(gc::errc::count_too_large));
}

}  // TEST_SUITE("gpu")
