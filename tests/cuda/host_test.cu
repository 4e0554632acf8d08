// Host-side checks of the CUDA backend (test suite "host"): they run without a GPU. The
// pieces of the device algorithms that decide bytes (CRC decomposition, radix-select
// decisions, frame layout) are GRADCOMP_HD functions; here they run sequentially and are
// compared with the CPU backend. Argument errors are caught before anything is enqueued.

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
namespace d = gradcomp::cuda::detail;
using gctest::rng;

namespace {

using topk_exact = gc::compressor<gc::partition::whole, gc::sparsify::topk, gc::quantize::none, gc::feedback::none>;
using chunks_topk = gc::compressor<gc::partition::chunks, gc::sparsify::topk, gc::quantize::fp16, gc::feedback::residual>;
using dense_bf16 = gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::bf16, gc::feedback::none>;

const d::crc_tables& tables() {
  static const d::crc_tables t = d::make_crc_tables();
  return t;
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  rng r{seed};
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(r.next() >> 56);
  return b;
}

}  // namespace

TEST_SUITE("host") {

TEST_CASE("device CRC pieces: a staged tile's CRC equals crc32c") {
  for (std::uint32_t r : {8u, 16u, 120u, 128u, 136u, 1000u, 4096u, 32760u, 32768u}) {
    CAPTURE(r);
    const auto bytes = random_bytes(r, r);
    std::vector<std::uint32_t> words(r / 4);
    std::memcpy(words.data(), bytes.data(), r);
    CHECK(d::tile_crc_model(tables(), words.data(), r) == gc::crc32c(bytes));
  }
}

TEST_CASE("device CRC pieces: shifted tile terms XOR to the CRC of the whole body") {
  // As the kernels do: body cut into tiles of tile_bytes, each term shifted by the bytes
  // after it, XORed in any order; then joined with the header bytes by crc32c_combine.
  for (std::size_t body : {std::size_t{8}, std::size_t{32768}, std::size_t{32776}, std::size_t{200008}, std::size_t{1} << 20}) {
    CAPTURE(body);
    const auto bytes = random_bytes(body + 84, body);
    const std::span<const std::byte> head(bytes.data(), 84), b(bytes.data() + 84, body);
    std::uint32_t acc = 0;
    for (std::size_t begin = 0; begin < body; begin += d::tile_bytes) {
      const auto r = static_cast<std::uint32_t>(std::min<std::size_t>(d::tile_bytes, body - begin));
      std::vector<std::uint32_t> words(r / 4);
      std::memcpy(words.data(), b.data() + begin, r);
      acc ^= d::crc_shift(tables(), d::tile_crc_model(tables(), words.data(), r), body - begin - r);
    }
    CHECK(acc == gc::crc32c(b));
    CHECK(gc::crc32c_combine(gc::crc32c(head), acc, body) == gc::crc32c(bytes));
  }
  // Distances beyond the tables' first levels.
  for (std::uint64_t far : {std::uint64_t{8} << 11, std::uint64_t{8} << 22, std::uint64_t{8} << 33, std::uint64_t{8} << 45}) {
    CAPTURE(far);
    CHECK(d::crc_shift(tables(), 0x12345678u, far) ==
          gc::detail::crc32c_mulmod(0x12345678u, gc::detail::crc32c_x_pow_8n(far)));
  }
}

TEST_CASE("radix-select decisions pick the CPU's indices") {
  const topk_exact::config base{};
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{1000}, std::size_t{65537}}) {
    for (double density : {0.001, 0.01, 0.3, 0.999, 1.0}) {
      for (int data = 0; data < 3; ++data) {
        CAPTURE(n);
        CAPTURE(density);
        CAPTURE(data);
        std::vector<float> g = gctest::gradient(n, n + static_cast<std::uint64_t>(data));
        if (data == 1)
          for (auto& x : g) x = 0.5f;  // all tied: the lowest indices win
        if (data == 2)
          for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 5) * (i % 2 ? -1.0f : 1.0f);
        auto cfg = base;
        cfg.sparsify.density = density;
        const topk_exact comp(cfg);
        gc::state st = comp.make_state(n);
        std::vector<std::byte> payload(comp.max_payload_bytes<float>(n));
        REQUIRE(gctest::u32_lists(comp).compress<float>(g, st, payload).ok());
        const auto h = gc::frame::parse(payload);
        REQUIRE(h.ok());
        std::vector<std::uint32_t> keys(n);
        for (std::size_t i = 0; i < n; ++i) keys[i] = gc::abs_key(g[i]);
        const auto model = d::select_model(keys, h->kept_count);
        REQUIRE(model.size() == h->kept_count);
        CHECK(std::memcmp(model.data(), payload.data() + h->index_offset(), 4 * model.size()) == 0);
      }
    }
  }
}

TEST_CASE("section layout mirrors compressor::layout") {
  const chunks_topk sparse({.partition = {.chunk_bytes = 4096}});
  const dense_bf16 dense;
  for (std::size_t count : {0u, 1u, 2u, 3u, 7u, 1000u, 65535u}) {
    for (std::size_t kept : {std::size_t{0}, std::size_t{1}, count / 2, count}) {
      if (kept > count) continue;
      const auto a = d::section_layout<chunks_topk>(sparse.get_config(), kept, count), b = sparse.layout(kept, count);
      CHECK(a.frame_bytes() == b.frame_bytes());
      CHECK(a.index_bytes == b.index_bytes);
      CHECK(a.value_bytes == b.value_bytes);
      CHECK(a.kept_count == b.kept_count);
      const auto c = d::section_layout<dense_bf16>(dense.get_config(), kept, count), e = dense.layout(kept, count);
      CHECK(c.frame_bytes() == e.frame_bytes());
      CHECK(c.value_bytes == e.value_bytes);
    }
  }
}

TEST_CASE("the device plan's totals match the CPU's payload size") {
  const chunks_topk comp({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.03}});
  for (std::size_t n : {0u, 1u, 1024u, 1025u, 100003u}) {
    CAPTURE(n);
    const auto p = d::plan_on_host<chunks_topk, float>(comp, n);
    CHECK(p.chunks == comp.chunk_count<float>(n));
    CHECK(p.total.frame == comp.max_payload_bytes<float>(n));
  }
}

TEST_CASE("argument errors are returned before anything is enqueued") {
  const dense_bf16 comp;
  const std::size_t n = 1000;
  // Fake device addresses: these calls must fail on the host, before any CUDA call.
  auto* fake = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 40);
  const gcu::device_state st{n, reinterpret_cast<std::uint64_t*>(fake), nullptr};
  const std::span<const float> grad(reinterpret_cast<const float*>(fake), n);
  gcu::report* rep = reinterpret_cast<gcu::report*>(fake);
  const std::size_t ws = gcu::compress_workspace_bytes<float>(comp, n);
  CHECK(ws > 0);
  const gcu::executor ex{nullptr, {fake, ws}};
  const std::size_t need = comp.max_payload_bytes<float>(n);

  CHECK(gcu::compress<float>(comp, ex, grad, st, {fake, need - 1}, rep) == gc::errc::buffer_too_small);
  CHECK(gcu::compress<float>(comp, ex, grad.first(n - 1), st, {fake, need}, rep) == gc::errc::size_mismatch);
  CHECK(gcu::compress<float>(comp, {nullptr, {fake, ws - 1}}, grad, st, {fake, need}, rep) == gc::errc::buffer_too_small);
  CHECK(gcu::compress<float>(comp, ex, grad, st, {fake + 4, need}, rep) == gc::errc::invalid_argument);
  CHECK(gcu::compress<float>(comp, ex, grad, {n, nullptr, nullptr}, {fake, need}, rep) == gc::errc::invalid_argument);

  using res = gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::bf16, gc::feedback::residual>;
  const res with_residual;
  CHECK(gcu::compress<float>(with_residual, ex, grad, st, {fake, need}, rep) == gc::errc::size_mismatch);

  const std::span<float> out(reinterpret_cast<float*>(fake), n);
  CHECK(gcu::decompress<float>(comp, ex, std::span<const std::byte>{}, out, rep) == gc::errc::truncated);
  CHECK(gcu::accumulate<float>(comp, {nullptr, {fake, 256}}, std::span<const std::byte>(fake, 96), out, rep) ==
        gc::errc::buffer_too_small);

  const topk_exact bad({.sparsify = {.density = 0.0}});
  CHECK(gcu::compress<float>(bad, ex, grad, st, {fake, need}, rep) == gc::errc::invalid_argument);
  CHECK(gcu::decompress<float>(bad, ex, std::span<const std::byte>(fake, 96), out, rep) == gc::errc::invalid_argument);
}

TEST_CASE("workspace queries") {
  const chunks_topk comp({.partition = {.chunk_bytes = 1 << 20}});
  CHECK(gcu::compress_workspace_bytes<float>(comp, 0) > 0);
  CHECK(gcu::compress_workspace_bytes<float>(comp, 1 << 22) > gcu::compress_workspace_bytes<float>(comp, 1 << 20));
  CHECK(gcu::decode_workspace_bytes<float>(comp, 1 << 20, 8) < gcu::decode_workspace_bytes<float>(comp, 1 << 20, 800));
  CHECK(gcu::max_frames(88) == 1);
  CHECK(gcu::state_bytes(comp, 10) >= 256 + 40);
}

}  // TEST_SUITE("host")
