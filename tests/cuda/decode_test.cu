// GPU decompress / accumulate == CPU, bit for bit (test suite "gpu"): valid payloads, several
// senders' payloads back to back (the all-gather case: the sum order must be the CPU's),
// frames of both source dtypes, and malformed frames, which must give the CPU's errc and
// leave the output untouched.

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
using namespace gctest::codecs;
using gctest::check_compress;
using gctest::check_decode;
using gctest::check_both;
using gctest::check_malformed;
using gctest::cpu_payload;

TEST_SUITE("gpu") {

TEST_CASE("decoding valid payloads equals the CPU, bit for bit") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8193}, std::size_t{100003}, (std::size_t{1} << 20) + 3}) {
    check_both<float>(dense_bf16{}, cpu_payload<float>(dense_bf16{}, n, 1), n, 1);
    check_both<gc::bf16_t>(dense_bf16{}, cpu_payload<gc::bf16_t>(dense_bf16{}, n, 2), n, 2);
    const chunks_dense_fp16_res c({.partition = {.chunk_bytes = 4100}});
    check_both<float>(c, cpu_payload<float>(c, n, 3), n, 3);
    for (double density : {0.001, 0.1, 1.0}) {
      const topk_bf16_res t({.sparsify = {.density = density}});
      check_both<float>(t, cpu_payload<float>(t, n, 4), n, 4);
      const chunks_topk_none u({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = density}});
      check_both<float>(u, cpu_payload<float>(u, n, 5), n, 5);
      check_both<gc::bf16_t>(u, cpu_payload<gc::bf16_t>(u, n, 6), n, 6);
    }
  }
}

TEST_CASE("several senders back to back: sums in payload order, like the CPU") {
  for (std::size_t n : {std::size_t{5000}, std::size_t{300001}}) {
    const topk_bf16_res t({.sparsify = {.density = 0.05}});
    const chunks_dense_fp16_res c({.partition = {.chunk_bytes = 1 << 16}});
    gctest::check_senders(t, c, n);
  }
}

TEST_CASE("frames of float and bf16 gradients in one payload (two chunk plans)") {
  const chunks_topk_none u({.partition = {.chunk_bytes = 4096}, .sparsify = {.density = 0.2}});
  const std::size_t n = 10000;
  auto p = cpu_payload<float>(u, n, 30);
  const auto q = cpu_payload<gc::bf16_t>(u, n, 31);
  p.insert(p.end(), q.begin(), q.end());
  check_both<float>(u, p, n, 10);
}

TEST_CASE("malformed frames: the CPU's errc, output untouched") {
  const std::size_t n = 3001;  // odd: bf16 value sections end in padding
  check_malformed<float>(dense_bf16{}, cpu_payload<float>(dense_bf16{}, n, 40), n);
  const topk_bf16_res t({.sparsify = {.density = 0.1}});
  check_malformed<float>(t, cpu_payload<float>(t, n, 41), n);
  const topk_bf16_res strict({.sparsify = {.density = 0.1}, .allow_non_finite = false});
  check_malformed<float>(strict, cpu_payload<float>(strict, n, 42), n);
  const chunks_topk_none u({.partition = {.chunk_bytes = 4000}, .sparsify = {.density = 0.3}});
  auto p = cpu_payload<float>(u, n, 43);
  check_malformed<float>(u, p, n);
  // The second of three frames broken: nothing of the first may be written.
  const auto h = gc::frame::parse(p);
  REQUIRE(h.ok());
  auto q = p;
  q[h->frame_bytes() + 40] ^= std::byte{1};
  check_both<float>(u, q, n, 44);
  // Decoding with another composition: codec mismatch.
  check_both<float>(dense_bf16{}, p, n, 45);
}

TEST_CASE("more frames than the workspace holds: buffer_too_small, output untouched") {
  const chunks_topk_none u({.partition = {.chunk_bytes = 4000}, .sparsify = {.density = 0.3}});
  const std::size_t n = 3001;
  const auto p = cpu_payload<float>(u, n, 50);
  gctest::device_bytes ws(gcu::decode_workspace_bytes<float>(u, n, 1)), in(p.size()), out(4 * n), rep(sizeof(gcu::report));
  GC_CUDA_CHECK(cudaMemcpy(in.data(), p.data(), p.size(), cudaMemcpyHostToDevice));
  const std::vector<float> start = gctest::gradient(n, 51);
  gctest::upload(out, start);
  REQUIRE(gcu::accumulate<float>(u, {nullptr, ws.span()}, std::span<const std::byte>(in.data(), p.size()),
                                 std::span<float>(out.as<float>(), n), rep.as<gcu::report>())
              .ok());
  CHECK(gctest::download<gcu::report>(rep, 1)[0].error() == gc::errc::buffer_too_small);
  CHECK(gctest::same_bits(gctest::download<float>(out, n), start));
}

}  // TEST_SUITE("gpu")
