// TAGC's bitmap and count sketch on the GPU against the host functions, byte for byte: the
// threshold bitmap, the sum-safe packing and its union (errors included), encode, decode with
// every fallback and a round bound, the structural peel; malformed input reported on the
// device with outputs untouched; the whole decode captured in a CUDA graph (no host sync).
#include <gradcomp/cuda/sketch.cuh>

#include "support.cuh"

#include <gradcomp/sketch/count_sketch.hpp>

#include <cstring>
#include <vector>

namespace {

using namespace gctest;
namespace gs = gradcomp::sketch;
namespace cs = gradcomp::cuda::sketch;

std::vector<std::uint32_t> random_bitmap(std::size_t count, double density, std::uint64_t seed) {
  rng r{seed * 7919 + 3};
  std::vector<std::uint32_t> bm(gs::bitmap_words(count), 0u);
  for (std::size_t j = 0; j < count; ++j)
    if (r.uniform() < density) bm[j / 32] |= 1u << (j % 32);
  return bm;
}

gs::geometry geometry_for(std::size_t count, std::uint32_t block, const std::vector<std::uint32_t>& bm, double cpi) {
  const auto rows = static_cast<std::uint32_t>(cpi * static_cast<double>(gs::bitmap_popcount(bm)) / block + 0.5);
  return *gs::make_geometry_rows(count, block, rows == 0 ? 1 : rows);
}

struct device_run {
  device_bytes ws, report;
  explicit device_run(std::size_t ws_bytes) : ws(ws_bytes), report(sizeof(cs::sketch_report)) {}
  cs::sketch_report* rep() const { return report.as<cs::sketch_report>(); }
  cs::sketch_report read() const { return download<cs::sketch_report>(report, 1)[0]; }
};

template <class Cell>
void check_decode(const gs::geometry& g, const std::vector<std::uint32_t>& bm, const std::vector<Cell>& cells,
                  gs::fallback fb, std::uint32_t rounds) {
  const std::size_t items = gs::bitmap_popcount(bm);
  std::vector<std::byte> hws(gs::peel_workspace_bytes(g, items));
  std::vector<float> want(g.count, -1.0f);
  std::vector<std::uint32_t> want_bits(bm.size());
  const auto st = gs::decode<Cell>(g, bm, cells, hws, want, {fb, want_bits, rounds});
  REQUIRE(st.ok());
  device_run run(*cs::workspace_bytes(g, items + 3, rounds));
  device_bytes d_bm(4 * bm.size()), d_cells(sizeof(Cell) * cells.size()), d_out(4 * g.count), d_bits(4 * bm.size());
  upload(d_bm, bm);
  upload(d_cells, cells);
  REQUIRE(cs::decode<Cell>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<Cell>(), cells.size()}, items + 3,
                           {d_out.as<float>(), g.count}, {d_bits.as<std::uint32_t>(), bm.size()}, fb, rounds, run.ws.span(),
                           run.rep(), nullptr)
              .ok());
  const auto rep = run.read();
  CHECK(rep.code == 0);
  CHECK(rep.items == st->items);
  CHECK(rep.peeled == st->peeled);
  CHECK(rep.rounds == st->rounds);
  CHECK(same_bits(download<float>(d_out, g.count), want));
  CHECK(download<std::uint32_t>(d_bits, bm.size()) == want_bits);
}

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("sketch on the GPU: threshold bitmap and sum-safe packing equal the host's") {
  const std::size_t n = 100003;
  const auto x = gradient(n, 5, true);
  device_bytes d_x(4 * n), d_bm(4 * gs::bitmap_words(n));
  upload(d_x, x);
  REQUIRE(cs::build_bitmap(d_x.as<float>(), n, 2e-3f, {d_bm.as<std::uint32_t>(), gs::bitmap_words(n)}, nullptr).ok());
  std::vector<std::uint32_t> want(gs::bitmap_words(n));
  REQUIRE(gs::build_bitmap(n, [&](std::size_t j) { return gc::abs_key(x[j]) >= gc::abs_key(2e-3f); }, std::span<std::uint32_t>(want)).ok());
  const auto bm = download<std::uint32_t>(d_bm, want.size());
  CHECK(bm == want);
  for (std::uint32_t world : {2u, 4u, 8u, 64u}) {
    const auto l = gs::sum_safe_layout::make(world);
    device_bytes d_packed(4 * l.words(n)), d_union(4 * bm.size());
    device_run run(0);
    REQUIRE(cs::to_sum_safe({d_bm.as<std::uint32_t>(), bm.size()}, n, world, {d_packed.as<std::uint32_t>(), l.words(n)}, nullptr).ok());
    std::vector<std::uint32_t> packed(l.words(n));
    REQUIRE(gs::to_sum_safe(bm, n, world, packed).ok());
    CHECK(download<std::uint32_t>(d_packed, packed.size()) == packed);
    REQUIRE(cs::union_from_sum_safe({d_packed.as<std::uint32_t>(), packed.size()}, n, world, {d_union.as<std::uint32_t>(), bm.size()},
                                    run.rep(), nullptr).ok());
    CHECK(run.read().code == 0);
    CHECK(download<std::uint32_t>(d_union, bm.size()) == bm);
    // A field above W, in two words: the first is reported, as on the host; output untouched.
    auto bad = packed;
    bad[7] = l.field_mask();
    bad[3] = l.per_word * l.width < 32 ? 1u << 31 : l.field_mask() << l.width;  // padding bit, or a field
    if (world < l.field_mask()) {
      upload(d_packed, bad);
      std::vector<std::uint32_t> sentinel(bm.size(), 0xabcdu);
      upload(d_union, sentinel);
      REQUIRE(cs::union_from_sum_safe({d_packed.as<std::uint32_t>(), bad.size()}, n, world, {d_union.as<std::uint32_t>(), bm.size()},
                                      run.rep(), nullptr).ok());
      std::vector<std::uint32_t> host_out(bm.size());
      CHECK(static_cast<gc::errc>(run.read().code) == gs::union_from_sum_safe(bad, n, world, host_out).code());
      CHECK(download<std::uint32_t>(d_union, bm.size()) == sentinel);
    }
  }
}

TEST_CASE("sketch on the GPU: encode, decode and structural peel equal the host's, bit for bit") {
  std::uint64_t seed = 11;
  for (std::size_t count : {std::size_t{1}, std::size_t{4099}, std::size_t{300007}})
    for (std::uint32_t block : {1u, 16u, 64u})
      for (double cpi : {0.7, 1.3, 2.0}) {
        CAPTURE(count);
        CAPTURE(block);
        CAPTURE(cpi);
        const auto bm = random_bitmap(count, 0.05, ++seed);
        const auto g = geometry_for(count, block, bm, cpi);
        const std::size_t items = gs::bitmap_popcount(bm);
        auto x = gradient(count, seed, true);
        std::vector<float> cells32(g.cells());
        std::vector<gc::bf16_t> cells16(g.cells());
        std::vector<std::byte> hws(gs::encode_workspace_bytes<gc::bf16_t>(g));
        REQUIRE(gs::encode<float>(g, x, bm, {}, {}, cells32).ok());
        REQUIRE(gs::encode<gc::bf16_t>(g, x, bm, {}, hws, cells16).ok());
        device_run run(*cs::workspace_bytes(g, items, 1));
        device_bytes d_x(4 * count), d_bm(4 * bm.size()), d_c32(4 * g.cells()), d_c16(2 * g.cells());
        upload(d_x, x);
        upload(d_bm, bm);
        const std::span<const std::uint32_t> dbm(d_bm.as<std::uint32_t>(), bm.size());
        REQUIRE(cs::encode<float>(g, d_x.as<float>(), dbm, items, {d_c32.as<float>(), g.cells()}, run.ws.span(), run.rep(), nullptr).ok());
        CHECK(same_bits(download<float>(d_c32, g.cells()), cells32));
        REQUIRE(cs::encode<gc::bf16_t>(g, d_x.as<float>(), dbm, items, {d_c16.as<gc::bf16_t>(), g.cells()}, run.ws.span(), run.rep(),
                                       nullptr).ok());
        CHECK(same_bits(download<gc::bf16_t>(d_c16, g.cells()), cells16));
        CHECK(run.read().items == items);
        for (gs::fallback fb : {gs::fallback::median, gs::fallback::zero})
          for (std::uint32_t rounds : {1u, 4u, 100u}) {
            check_decode<float>(g, bm, cells32, fb, rounds);
            check_decode<gc::bf16_t>(g, bm, cells16, fb, rounds);
          }
        std::vector<std::byte> pws(gs::peel_workspace_bytes(g, items));
        std::vector<std::uint32_t> peelable(bm.size());
        const auto sp = gs::structural_peel(g, bm, pws, peelable, 100);
        REQUIRE(sp.ok());
        device_run prun(*cs::workspace_bytes(g, items, 100));
        device_bytes d_peel(4 * bm.size());
        REQUIRE(cs::structural_peel(g, dbm, items, {d_peel.as<std::uint32_t>(), bm.size()}, 100, prun.ws.span(), prun.rep(), nullptr).ok());
        CHECK(download<std::uint32_t>(d_peel, bm.size()) == peelable);
        CHECK(prun.read().peeled == sp->peeled);
        CHECK(prun.read().rounds == sp->rounds);
      }
}

TEST_CASE("sketch on the GPU: a bit past the region or too many items is reported, outputs untouched") {
  const std::size_t count = 1000;
  auto bm = random_bitmap(count, 0.1, 3);
  const auto g = geometry_for(count, 16, bm, 1.5);
  const std::size_t items = gs::bitmap_popcount(bm);
  device_run run(*cs::workspace_bytes(g, items, 8));
  device_bytes d_bm(4 * bm.size()), d_cells(4 * g.cells()), d_out(4 * count);
  const std::vector<float> cells(g.cells(), 1.0f), sentinel(count, -3.0f);
  upload(d_cells, cells);
  const auto run_decode = [&](std::size_t capacity) {
    upload(d_out, sentinel);
    return cs::decode<float>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<float>(), cells.size()}, capacity,
                             {d_out.as<float>(), count}, {}, gs::fallback::median, 8, run.ws.span(), run.rep(), nullptr);
  };
  bm.back() |= 1u << 31;  // 1000 % 32 = 8: position 1015 does not exist
  upload(d_bm, bm);
  REQUIRE(run_decode(items).ok());
  CHECK(run.read().error() == gc::errc::index_out_of_range);
  CHECK(download<float>(d_out, count) == sentinel);
  bm.back() &= ~(1u << 31);
  upload(d_bm, bm);
  REQUIRE(run_decode(items - 1 > 0 ? items - 1 : 0).ok());
  CHECK(run.read().error() == gc::errc::count_too_large);
  CHECK(download<float>(d_out, count) == sentinel);
  // Host-side checks return at once.
  CHECK(cs::decode<float>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<float>(), cells.size()}, items, {d_out.as<float>(), count},
                          {}, gs::fallback::median, 8, run.ws.span().first(64), run.rep(), nullptr) == gc::errc::buffer_too_small);
  CHECK(cs::decode<float>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<float>(), cells.size() - 1}, items,
                          {d_out.as<float>(), count}, {}, gs::fallback::median, 8, run.ws.span(), run.rep(), nullptr) == gc::errc::size_mismatch);
  CHECK(cs::decode<float>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<float>(), cells.size()}, items, {d_out.as<float>(), count},
                          {}, gs::fallback::median, 0, run.ws.span(), run.rep(), nullptr) == gc::errc::invalid_argument);
}

TEST_CASE("sketch on the GPU: the decode is captured in a graph (no host synchronisation inside)") {
  const std::size_t count = 200003;
  const auto bm = random_bitmap(count, 0.05, 8);
  const auto g = geometry_for(count, 64, bm, 1.5);
  const std::size_t items = gs::bitmap_popcount(bm);
  std::vector<float> cells(g.cells());
  for (std::size_t c = 0; c < cells.size(); ++c) cells[c] = static_cast<float>(c % 97) * 0.25f;
  device_run run(*cs::workspace_bytes(g, items, 64));
  device_bytes d_bm(4 * bm.size()), d_cells(4 * g.cells()), d_out(4 * count);
  upload(d_bm, bm);
  upload(d_cells, cells);
  cudaStream_t s;
  GC_CUDA_CHECK(cudaStreamCreate(&s));
  GC_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const gc::status st = cs::decode<float>(g, {d_bm.as<std::uint32_t>(), bm.size()}, {d_cells.as<float>(), cells.size()}, items,
                                          {d_out.as<float>(), count}, {}, gs::fallback::zero, 64, run.ws.span(), run.rep(), s);
  cudaGraph_t graph;
  GC_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  REQUIRE(st.ok());
  cudaGraphExec_t exec;
  GC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  GC_CUDA_CHECK(cudaGraphLaunch(exec, s));
  GC_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::byte> hws(gs::peel_workspace_bytes(g, items));
  std::vector<float> want(count);
  const auto host = gs::decode<float>(g, bm, cells, hws, want, {gs::fallback::zero, {}, 64});
  REQUIRE(host.ok());
  CHECK(same_bits(download<float>(d_out, count), want));
  CHECK(run.read().peeled == host->peeled);
  GC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  GC_CUDA_CHECK(cudaGraphDestroy(graph));
  GC_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // TEST_SUITE("gpu")

TEST_CASE("sketch on the GPU, host side: argument checks before any launch") {
  const auto g = *gs::make_geometry_rows(100, 4, 3);
  cs::sketch_report* none = nullptr;
  std::vector<std::uint32_t> bm(4);
  CHECK(cs::decode<float>(g, {bm.data(), 3}, {}, 10, {}, {}, gs::fallback::zero, 4, {}, none, nullptr) == gc::errc::size_mismatch);
  CHECK(cs::to_sum_safe({bm.data(), 4}, 100, 0, {}, nullptr) == gc::errc::invalid_argument);
  CHECK(cs::build_bitmap(nullptr, 100, 1.0f, {bm.data(), 3}, nullptr) == gc::errc::size_mismatch);
}
