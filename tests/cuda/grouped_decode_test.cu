// GPU decompress / accumulate of grouped-quantizer frames == CPU, bit for bit (test suite
// "gpu"): valid payloads (packed codes, per-group metadata), several senders back to back,
// the generic malformed frames, and malformed metadata (negative, NaN or infinite scales,
// overflowing ranges), which must give the CPU's errc with the output untouched.

#include <limits>

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
using namespace gctest::codecs;
using gc::quantize::rounding;
using gctest::check_both;
using gctest::check_malformed;
using gctest::cpu_payload;
using gctest::put;

TEST_SUITE("gpu") {

TEST_CASE("grouped: decoding valid payloads equals the CPU, bit for bit") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1025}, std::size_t{8193}, std::size_t{100003},
                        (std::size_t{1} << 20) + 3}) {
    CAPTURE(n);
    for (std::size_t group : {std::size_t{1}, std::size_t{2}, std::size_t{128}}) {
      CAPTURE(group);
      const dense_int8 a({.quantize = {.group = group}});
      check_both<float>(a, cpu_payload<float>(a, n, 1), n, 1);
      const chunks_dense_int4a_res b({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group}});
      check_both<float>(b, cpu_payload<float>(b, n, 2), n, 2);
      check_both<gc::bf16_t>(b, cpu_payload<gc::bf16_t>(b, n, 3), n, 3);
      for (double density : {0.001, 0.1, 1.0}) {
        const chunks_topk_int2_res c({.partition = {.chunk_bytes = 4100},
                                      .sparsify = {.density = density},
                                      .quantize = {.group = group, .round = rounding::stochastic}});
        check_both<float>(c, cpu_payload<float>(c, n, 4), n, 4);
      }
    }
    const chunks_dense_odd_res<13> d({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 8}});
    check_both<float>(d, cpu_payload<float>(d, n, 5), n, 5);
    const chunks_topk_odd<3> e({.partition = {.chunk_bytes = 1 << 18}, .sparsify = {.density = 0.3}, .quantize = {.group = 0}});
    check_both<float>(e, cpu_payload<float>(e, n, 6), n, 6);
  }
}

TEST_CASE("grouped: several senders back to back, sums in payload order") {
  for (std::size_t n : {std::size_t{5000}, std::size_t{300001}}) {
    const chunks_topk_int2_res t({.partition = {.chunk_bytes = 1 << 16}, .sparsify = {.density = 0.05}, .quantize = {.group = 2}});
    const chunks_dense_int4a_res c({.partition = {.chunk_bytes = 1 << 16}, .quantize = {.group = 32}});
    gctest::check_senders(t, c, n);
  }
}

TEST_CASE("grouped: malformed frames give the CPU's errc, output untouched") {
  const std::size_t n = 3001;
  const dense_int8 a({.quantize = {.group = 2}});
  check_malformed<float>(a, cpu_payload<float>(a, n, 40), n);
  const chunks_topk_int2_res b({.partition = {.chunk_bytes = 4000}, .sparsify = {.density = 0.3}, .quantize = {.group = 1}});
  check_malformed<float>(b, cpu_payload<float>(b, n, 41), n);
  const chunks_dense_odd_res<13> strict({.partition = {.chunk_bytes = 4000}, .quantize = {.group = 8}, .allow_non_finite = false});
  check_malformed<float>(strict, cpu_payload<float>(strict, n, 42), n);
}

TEST_CASE("grouped: malformed metadata gives the CPU's errc, output untouched") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::size_t meta = gc::frame::header_bytes;
  // Writes v at each offset of the payload, reseals every frame, decodes on both backends.
  const auto tamper = [&](const auto& comp, std::size_t n, std::vector<std::pair<std::size_t, float>> at) {
    auto p = cpu_payload<float>(comp, n, 50);
    for (auto [offset, v] : at) put<float>(p, offset, v);
    gctest::reseal_all(p);
    check_both<float>(comp, p, n, 51);
  };
  const dense_int8 a({.quantize = {.group = 1}});  // 40000 groups: metadata over several 32 KiB tiles
  tamper(a, 40000, {{meta, -1.0f}});
  tamper(a, 40000, {{meta + 4 * 39999, -0.0f}});                          // the last group
  tamper(a, 40000, {{meta + 4 * 30000, nan}, {meta + 4 * 9000, -2.0f}});  // the earlier group decides
  tamper(a, 40000, {{meta + 4 * 9000, inf}, {meta + 4 * 30000, -2.0f}});
  tamper(a, 40000, {{meta + 4 * 123, 0.0f}});                             // zero scale: valid
  const chunks_dense_int4a_res b({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 64}});
  tamper(b, 5000, {{meta + 8 * 3 + 4, nan}});  // lo
  tamper(b, 5000, {{meta + 8 * 5, -0.5f}});
  tamper(b, 5000, {{meta + 8 * 2, 3e38f}});    // lo + 15 s overflows
  tamper(b, 5000, {{meta + 8 * 2 + 4, -3e38f}});
  // The second frame's metadata broken: nothing of the first may be written.
  const auto p = cpu_payload<float>(b, 5000, 52);
  const std::size_t second = gc::frame::parse(p)->frame_bytes();
  tamper(b, 5000, {{second + meta + 8, -1.0f}});
  const chunks_topk_int2_res c({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.1}, .quantize = {.group = 2}});
  tamper(c, 5000, {{meta + 4 * 7, -1.0f}});
  tamper(c, 5000, {{meta + 4 * 50, inf}, {meta + 4 * 51, nan}});
  // Strict receivers: a step so large that values decode to infinity (odd_bits accepts it).
  const chunks_dense_odd_res<13> strict({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 8}, .allow_non_finite = false});
  tamper(strict, 5000, {{meta + 8 * 20 + 4, 3e38f}});
  tamper(strict, 5000, {{meta + 8 * 20 + 4, 3e38f}, {meta + 8 * 40 + 4, -1.0f}});  // bad metadata before values
}

}  // TEST_SUITE("gpu")
