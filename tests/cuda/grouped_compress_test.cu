// GPU compression with grouped quantizers == CPU compression, byte for byte (test suite "gpu"):
// int_block<8>, int_block<4, asymmetric> and int_block<2> (nearest and stochastic rounding),
// dense and top-k, with and without residual feedback, whole and chunked (chunks that are not
// a multiple of the group, groups whose codes do not start on a byte boundary), and the odd
// code widths of the test quantizer odd_bits (3, 13, 32 bits). Payloads, residuals and steps
// are compared over several steps, so stochastic rounding sees several Philox keys.

#include <limits>

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
using namespace gctest::codecs;
using gctest::check_compress;
using gc::quantize::rounding;

namespace {

// Around the span (1024 values), the 8-values-per-thread encode step, the largest group
// (4096), the body tile (32 KiB) and the selection tile (32768).
const std::size_t sizes[] = {0, 1, 2, 3, 7, 9, 255, 1023, 1024, 1025, 2049, 4095, 4097, 8193, 32769, 100003};
constexpr std::size_t big = (std::size_t{1} << 20) + 3;
const std::size_t groups[] = {1, 2, 128, 4096};
const rounding roundings[] = {rounding::nearest, rounding::stochastic};

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("int_block<8> dense: payload bytes equal the CPU's, every group size and rounding") {
  for (std::size_t group : groups)
    for (rounding round : roundings) {
      CAPTURE(group);
      CAPTURE(static_cast<int>(round));
      const dense_int8 comp({.quantize = {.group = group, .round = round}, .seed = 3});
      for (std::size_t n : sizes) check_compress<float>(comp, n, 2, 1);
    }
  check_compress<float>(dense_int8{}, big, 2, 2);
  check_compress<float>(dense_int8({.quantize = {.group = 4096, .round = rounding::stochastic}}), big, 2, 3);
}

TEST_CASE("int_block<4, asymmetric> dense with residual, chunked, float and bf16 gradients") {
  // 40-byte chunks: 10 floats or 20 bf16 (shorter than a group, or a group and a bit);
  // 4100 bytes: 1025 floats, not a multiple of any group size > 1.
  for (std::size_t chunk_bytes : {std::size_t{40}, std::size_t{4100}, std::size_t{1} << 20})
    for (std::size_t group : {std::size_t{2}, std::size_t{64}, std::size_t{1024}})
      for (rounding round : roundings) {
        CAPTURE(chunk_bytes);
        CAPTURE(group);
        CAPTURE(static_cast<int>(round));
        const chunks_dense_int4a_res comp({.partition = {.chunk_bytes = chunk_bytes}, .quantize = {.group = group, .round = round}});
        for (std::size_t n : sizes) {
          if (chunk_bytes == 40 && n > 20000) continue;  // thousands of tiny frames: enough below
          check_compress<float>(comp, n, 3, 4);
          check_compress<gc::bf16_t>(comp, n, 2, 5);
        }
      }
  check_compress<float>(chunks_dense_int4a_res({.partition = {.chunk_bytes = 1 << 20}}), big, 2, 6);
}

TEST_CASE("int_block<2> stochastic dense with residual: codes off byte boundaries (groups of 1 and 2)") {
  for (std::size_t chunk_bytes : {std::size_t{40}, std::size_t{4100}, std::size_t{1} << 20})
    for (std::size_t group : {std::size_t{1}, std::size_t{2}, std::size_t{64}}) {
      CAPTURE(chunk_bytes);
      CAPTURE(group);
      const chunks_dense_int2_res comp(
          {.partition = {.chunk_bytes = chunk_bytes}, .quantize = {.group = group, .round = rounding::stochastic}, .seed = 11});
      for (std::size_t n : sizes) {
        if (chunk_bytes == 40 && n > 20000) continue;
        check_compress<float>(comp, n, 3, 7);
      }
    }
  check_compress<float>(chunks_dense_int2_res({.partition = {.chunk_bytes = 1 << 20},
                                               .quantize = {.group = 2, .round = rounding::stochastic}}),
                        big, 3, 8);
}

TEST_CASE("grouped top-k: indices, metadata, codes and residual equal the CPU's") {
  for (double density : {0.001, 0.05, 0.5, 1.0})
    for (std::size_t group : {std::size_t{1}, std::size_t{2}, std::size_t{128}}) {
      CAPTURE(density);
      CAPTURE(group);
      const topk_int8_res a({.sparsify = {.density = density}, .quantize = {.group = group}});
      const chunks_topk_int4a b({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = density}, .quantize = {.group = group}});
      const chunks_topk_int2_res c({.partition = {.chunk_bytes = 1 << 18},
                                    .sparsify = {.density = density},
                                    .quantize = {.group = group, .round = rounding::stochastic},
                                    .seed = 5});
      for (std::size_t n : sizes) {
        check_compress<float>(a, n, 3, 9);
        check_compress<gc::bf16_t>(b, n, 2, 10);
        check_compress<float>(c, n, 3, 11);
      }
    }
  check_compress<float>(topk_int8_res({.sparsify = {.density = 0.01}}), big, 2, 12);
  check_compress<float>(chunks_topk_int2_res({.partition = {.chunk_bytes = 1 << 20},
                                              .sparsify = {.density = 0.1},
                                              .quantize = {.group = 1, .round = rounding::stochastic}}),
                        big, 2, 13);
}

TEST_CASE("odd code widths (3, 13, 32 bits): codes straddle bytes and words") {
  for (std::size_t group : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{4096}}) {
    CAPTURE(group);
    const chunks_dense_odd_res<3> a({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group, .round = rounding::stochastic}});
    const chunks_dense_odd_res<13> b({.partition = {.chunk_bytes = 1 << 20}, .quantize = {.group = group}});
    const chunks_topk_odd<32> c({.partition = {.chunk_bytes = 4100},
                                 .sparsify = {.density = 0.2},
                                 .quantize = {.group = group, .round = rounding::stochastic}});
    for (std::size_t n : sizes) {
      check_compress<float>(a, n, 2, 14);
      check_compress<float>(b, n, 2, 15);
      check_compress<float>(c, n, 2, 16);
    }
  }
}

TEST_CASE("grouped, infinite gradients: carried as infinite scales, like the CPU") {
  std::vector<float> g = gctest::gradient(50000, 17, true);
  for (float& x : g)
    if (x != x) x = -std::numeric_limits<float>::infinity();  // no NaN: see the next case
  gctest::check_compress_once(dense_int8({.quantize = {.group = 64}}), g);
  gctest::check_compress_once(chunks_topk_int4a({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.05}, .quantize = {.group = 16}}), g);
  gctest::check_compress_once(chunks_dense_int4a_res({.quantize = {.group = 8, .round = rounding::stochastic}}), g);
}

TEST_CASE("grouped, NaN gradients: rejected like the CPU when forbidden") {
  const std::vector<float> g = gctest::gradient(50000, 18, true);
  gctest::check_compress_once(chunks_dense_int4a_res({.allow_non_finite = false}), g);
  gctest::check_compress_once(topk_int8_res({.sparsify = {.density = 0.05}, .allow_non_finite = false}), g);
}

// A NaN group's scale is NaN arithmetic (x86 keeps the operand's payload, CUDA returns
// 0x7fffffff): store_meta writes it canonical, so the bytes agree (docs/cuda.md, rule 7).
TEST_CASE("grouped, NaN gradients carried: the scale's NaN bits") {
  const std::vector<float> g = gctest::gradient(50000, 19, true);
  gctest::check_compress_once(dense_int8({.quantize = {.group = 64}}), g);
}

}  // TEST_SUITE("gpu")
