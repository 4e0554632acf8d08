// The asynchronous calls under CUDA graph capture (test suite "gpu"): a captured
// compress + accumulate, replayed for three steps, gives the CPU's payloads, residual, step
// and sum. Replays advance the device-resident step, so each step's headers differ.

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;

TEST_SUITE("gpu") {

TEST_CASE("compress and accumulate captured in a CUDA graph") {
  using C = gc::compressor<gc::partition::chunks, gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual>;
  const C comp({.partition = {.chunk_bytes = 1 << 18}, .sparsify = {.density = 0.01}});
  const std::size_t n = 300007;
  const std::size_t bytes = comp.max_payload_bytes<float>(n);

  gctest::device_bytes sm(gcu::state_bytes(comp, n)), cws(gcu::compress_workspace_bytes<float>(comp, n)),
      dws(gcu::decode_workspace_bytes<float>(comp, n, comp.chunk_count<float>(n))), grad(4 * n), payload(bytes),
      sum(4 * n), reports(2 * sizeof(gcu::report));
  cudaStream_t stream;
  GC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto st = gcu::make_state(comp, sm.span(), n, stream);
  REQUIRE(st.ok());
  GC_CUDA_CHECK(cudaMemsetAsync(sum.data(), 0, 4 * n, stream));
  GC_CUDA_CHECK(cudaStreamSynchronize(stream));

  auto* rep = reports.as<gcu::report>();
  cudaGraph_t graph;
  GC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const gc::status a = gcu::compress<float>(comp, {stream, cws.span()}, std::span<const float>(grad.as<float>(), n), *st,
                                            payload.span(), rep);
  const gc::status b = gcu::accumulate<float>(comp, {stream, dws.span()}, std::span<const std::byte>(payload.data(), bytes),
                                              std::span<float>(sum.as<float>(), n), rep + 1);
  GC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  cudaGraphExec_t exec;
  GC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  gc::state cpu = comp.make_state(n);
  std::vector<std::byte> want(bytes);
  std::vector<float> cpu_sum(n, 0.0f);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const std::vector<float> g = gctest::gradient(n, 60 + static_cast<std::uint64_t>(step));
    GC_CUDA_CHECK(cudaMemcpyAsync(grad.data(), g.data(), 4 * n, cudaMemcpyHostToDevice, stream));
    GC_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    GC_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto w = gctest::u32_lists(comp).compress<float>(g, cpu, want);
    REQUIRE(w.ok());
    REQUIRE(comp.accumulate<float>(std::span<const std::byte>(want.data(), *w), cpu_sum).ok());
    const auto r = gctest::download<gcu::report>(reports, 2);
    CHECK(r[0].error() == gc::errc::ok);
    CHECK(r[0].bytes == *w);
    CHECK(r[1].error() == gc::errc::ok);
    CHECK(gctest::download<std::byte>(payload, *w) == std::vector<std::byte>(want.begin(), want.begin() + static_cast<long>(*w)));
  }
  CHECK(gctest::same_bits(gctest::download<float>(sum, n), cpu_sum));
  gc::state back = comp.make_state(n);
  REQUIRE(gcu::download_state(*st, back).ok());
  CHECK(back.step == 3);
  CHECK(gctest::same_bits(back.residual, cpu.residual));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // TEST_SUITE("gpu")
