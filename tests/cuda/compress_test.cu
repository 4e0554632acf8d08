// GPU compression == CPU compression, byte for byte (test suite "gpu"): payloads, residuals
// and steps over several steps, for sizes around every tile boundary, densities from 0.1% to
// 100%, both partitioners, all quantizers and feedbacks, float and bf16 gradients.

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
using namespace gctest::codecs;
using gctest::check_compress;

namespace {


// Around the block (256), 8-per-thread round (2048), value tile (8192/16384 codes), selection
// tile (32768) and apply tile (8192) boundaries, plus one beyond 2^20.
const std::size_t sizes[] = {0, 1, 2, 3, 7, 255, 256, 257, 2047, 2049, 8191, 8193, 16383, 16385, 32767, 32769, 100003};
constexpr std::size_t big = (std::size_t{1} << 20) + 3;

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("dense casts: payload bytes equal the CPU's") {
  for (std::size_t n : sizes) check_compress<float>(dense_bf16{}, n, 2, 1);
  check_compress<float>(dense_bf16{}, big, 1, 2);
  for (std::size_t n : sizes) check_compress<float>(dense_none_res{}, n, 3, 3);
  check_compress<float>(dense_none_res{}, big, 2, 4);
}

TEST_CASE("dense fp16 with residual, chunked, float and bf16 gradients") {
  for (std::size_t chunk_bytes : {std::size_t{40}, std::size_t{4100}, std::size_t{1} << 20}) {
    CAPTURE(chunk_bytes);
    const chunks_dense_fp16_res comp({.partition = {.chunk_bytes = chunk_bytes}});
    for (std::size_t n : sizes) {
      if (chunk_bytes == 40 && n > 20000) continue;  // thousands of tiny frames: enough below
      check_compress<float>(comp, n, 3, 5);
      check_compress<gc::bf16_t>(comp, n, 2, 6);
    }
  }
  check_compress<float>(chunks_dense_fp16_res({.partition = {.chunk_bytes = 1 << 20}}), big, 2, 7);
}

TEST_CASE("exact top-k with residual: indices, values and residual equal the CPU's") {
  for (double density : {0.001, 0.01, 0.1, 0.5, 1.0}) {
    CAPTURE(density);
    const topk_bf16_res comp({.sparsify = {.density = density}});
    for (std::size_t n : sizes) check_compress<float>(comp, n, 3, 8);
  }
  for (double density : {0.001, 0.01, 0.1}) check_compress<float>(topk_bf16_res({.sparsify = {.density = density}}), big, 2, 9);
}

TEST_CASE("exact top-k, chunked, no feedback and fp16 with residual") {
  for (std::size_t chunk_bytes : {std::size_t{40}, std::size_t{4100}, std::size_t{1} << 18}) {
    for (double density : {0.001, 0.05, 0.5}) {
      CAPTURE(chunk_bytes);
      CAPTURE(density);
      const chunks_topk_none a({.partition = {.chunk_bytes = chunk_bytes}, .sparsify = {.density = density}});
      const chunks_topk_fp16_res b({.partition = {.chunk_bytes = chunk_bytes}, .sparsify = {.density = density}});
      for (std::size_t n : sizes) {
        if (chunk_bytes == 40 && n > 20000) continue;
        check_compress<float>(a, n, 2, 10);
        check_compress<gc::bf16_t>(b, n, 2, 11);
      }
    }
  }
  check_compress<float>(chunks_topk_fp16_res({.partition = {.chunk_bytes = 1 << 20}, .sparsify = {.density = 0.01}}), big, 2, 12);
}

TEST_CASE("fp16 overflow to infinity, without and with residual") {
  using dense_fp16 = whole<gc::sparsify::dense, gc::quantize::fp16, gc::feedback::none>;
  using topk_fp16 = chunked<gc::sparsify::topk, gc::quantize::fp16, gc::feedback::none>;
  for (std::size_t n : {std::size_t{3001}, std::size_t{100003}}) {
    check_compress<float>(dense_fp16{}, n, 3, 15, true);
    check_compress<float>(topk_fp16({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.05}}), n, 3, 16, true);
    // One step: the residual becomes x - inf = -inf exactly (a second step would make NaN).
    check_compress<float>(chunks_dense_fp16_res({.partition = {.chunk_bytes = 4100}}), n, 1, 17, true);
    check_compress<float>(chunks_topk_fp16_res({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.05}}), n, 1, 18,
                          true);
  }
}

TEST_CASE("top-k ties go to the lower index, as on the CPU") {
  // All magnitudes equal; then two magnitudes with the k-th inside a long run of ties.
  for (std::size_t n : {std::size_t{1000}, std::size_t{70001}}) {
    for (double density : {0.01, 0.37}) {
      CAPTURE(n);
      CAPTURE(density);
      using plain = whole<gc::sparsify::topk, gc::quantize::none, gc::feedback::none>;
      const plain comp({.sparsify = {.density = density}});
      for (int pattern = 0; pattern < 2; ++pattern) {
        std::vector<float> g(n);
        for (std::size_t i = 0; i < n; ++i) g[i] = pattern == 0 ? (i % 2 ? -0.25f : 0.25f) : (i % 7 == 0 ? 2.0f : -1.0f);
        gc::state cpu = comp.make_state(n);
        std::vector<std::byte> want(comp.max_payload_bytes<float>(n));
        REQUIRE(gctest::u32_lists(comp).compress<float>(g, cpu, want).ok());
        gctest::device_bytes grad(4 * n), payload(want.size()), ws(gcu::compress_workspace_bytes<float>(comp, n)),
            sm(gcu::state_bytes(comp, n));
        gctest::upload(grad, g);
        const auto st = gcu::make_state(comp, sm.span(), n);
        REQUIRE(st.ok());
        const auto got = gcu::compress<float>(comp, {nullptr, ws.span()}, std::span<const float>(grad.as<float>(), n), *st,
                                              payload.span());
        REQUIRE(got.ok());
        CHECK(gctest::download<std::byte>(payload, want.size()) == want);
      }
    }
  }
}

TEST_CASE("non-finite gradients: rejected like the CPU when forbidden, carried otherwise") {
  // One chunk of NaN/inf-laden gradient: the report's errc, the state and (when carried) the
  // payload equal the CPU's.
  const auto check_non_finite = [](const auto& comp) { gctest::check_compress_once(comp, gctest::gradient(50000, 13, true)); };
  // Forbidden: both reject before writing anything (one chunk: the CPU touched nothing either).
  check_non_finite(whole<gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual>(
      {.sparsify = {.density = 0.05}, .allow_non_finite = false}));
  check_non_finite(whole<gc::sparsify::dense, gc::quantize::fp16, gc::feedback::residual>({.allow_non_finite = false}));
  // Allowed: carried bit for bit where no arithmetic touches them (no feedback).
  check_non_finite(whole<gc::sparsify::topk, gc::quantize::bf16, gc::feedback::none>({.sparsify = {.density = 0.05}}));
  check_non_finite(whole<gc::sparsify::dense, gc::quantize::fp16, gc::feedback::none>({}));
}

TEST_CASE("state round trip through a checkpoint") {
  const topk_bf16_res comp({.sparsify = {.density = 0.02}});
  const std::size_t n = 40000;
  gctest::device_bytes sm(gcu::state_bytes(comp, n)), ws(gcu::compress_workspace_bytes<float>(comp, n)), grad(4 * n),
      payload(comp.max_payload_bytes<float>(n));
  const auto st = gcu::make_state(comp, sm.span(), n);
  REQUIRE(st.ok());
  gctest::upload(grad, gctest::gradient(n, 14));
  REQUIRE(gcu::compress<float>(comp, {nullptr, ws.span()}, std::span<const float>(grad.as<float>(), n), *st, payload.span()).ok());
  gc::state host = comp.make_state(n);
  REQUIRE(gcu::download_state(*st, host).ok());
  std::vector<std::byte> image(gc::checkpoint_bytes(host));
  REQUIRE(gc::save_checkpoint(host, comp.codec_id(), image).ok());
  gc::state restored = comp.make_state(n);
  REQUIRE(gc::load_checkpoint(image, comp.codec_id(), restored).ok());
  gctest::device_bytes sm2(gcu::state_bytes(comp, n));
  const auto st2 = gcu::make_state(comp, sm2.span(), n);
  REQUIRE(st2.ok());
  REQUIRE(gcu::upload_state(restored, *st2).ok());
  gc::state again = comp.make_state(n);
  REQUIRE(gcu::download_state(*st2, again).ok());
  CHECK(again.step == 1);
  CHECK(gctest::same_bits(again.residual, host.residual));
}

}  // TEST_SUITE("gpu")
