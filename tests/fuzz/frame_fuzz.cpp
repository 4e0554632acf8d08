// libFuzzer target: decoding untrusted payloads. Whatever the bytes, decompress and accumulate
// must return (no crash, hang, or out-of-bounds access under ASan/UBSan) and, on error,
// leave the output exactly as it was.
//
// Input: byte 0 picks the compressor, byte 1 the options (bit 0: bf16 output, bit 1: reject
// non-finite values, bit 2: re-seal CRCs first so mutations reach the checks behind the
// checksum), bytes 2..3 the output length (little-endian u16), the rest is the payload.

#include <gradcomp/gradcomp.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reseal.hpp"

using namespace gradcomp;

namespace {

template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T, class C>
void decode_both(const C& comp, std::span<const std::byte> payload, std::size_t n) {
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = from_float<T>(static_cast<float>(i % 7) - 3.0f);
  const std::vector<T> before = out;
  if (!comp.template decompress<T>(payload, std::span(out)).ok() && !same(out, before)) std::abort();
  const std::vector<T> after_decompress = out;
  if (!comp.template accumulate<T>(payload, std::span(out)).ok() && !same(out, after_decompress)) std::abort();
}

template <class C>
void run(typename C::config cfg, std::uint8_t options, std::span<const std::byte> payload, std::size_t n) {
  cfg.allow_non_finite = !(options & 2);
  const C comp(cfg);
  if (options & 1) {
    decode_both<bf16_t>(comp, payload, n);
  } else {
    decode_both<float>(comp, payload, n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  const std::uint8_t which = data[0], options = data[1];
  const std::size_t n = data[2] | (std::size_t{data[3]} << 8);
  std::vector<std::byte> payload(reinterpret_cast<const std::byte*>(data + 4), reinterpret_cast<const std::byte*>(data + size));
  if (options & 4) reseal(payload);
  using quantize::int_block;
  using quantize::int_range;
  switch (which % 20) {
    case 18: run<compressor<partition::chunks, sparsify::dense, int_block<4>, feedback::none, transform::hadamard>>({.partition = {.chunk_bytes = 256}, .quantize = {.group = 8}, .transform = {.block = 16, .seed = 3}}, options, payload, n); break;
    case 19: run<compressor<partition::whole, sparsify::row_topk, quantize::bf16, feedback::none, transform::dct>>({.sparsify = {.cols = 16, .k_per_row = 2}, .transform = {.block = 8}}, options, payload, n); break;
    case 14: run<compressor<partition::whole, sparsify::threshold, quantize::bf16, feedback::none>>({.sparsify = {.density = 0.4}}, options, payload, n); break;
    case 15: run<compressor<partition::whole, sparsify::randomk, quantize::bf16, feedback::none>>({.sparsify = {.density = 0.3}, .seed = 7}, options, payload, n); break;
    case 16: run<compressor<partition::whole, sparsify::row_topk, quantize::none, feedback::none>>({.sparsify = {.cols = 4, .k_per_row = 1}}, options, payload, n); break;
    case 17: run<compressor<partition::chunks, sparsify::topk, quantize::none, feedback::none>>({.partition = {.chunk_bytes = 800}, .sparsify = {.density = 0.015}}, options, payload, n); break;
    case 8: run<compressor<partition::whole, sparsify::dense, quantize::fp8_e4m3, feedback::none>>({.quantize = {.group = 4}}, options, payload, n); break;
    case 9: run<compressor<partition::whole, sparsify::topk, quantize::natural, feedback::none>>({.sparsify = {.density = 0.5}}, options, payload, n); break;
    case 10: run<compressor<partition::chunks, sparsify::dense, quantize::qsgd<4>, feedback::none>>({.partition = {.chunk_bytes = 96}, .quantize = {.group = 8}}, options, payload, n); break;
    case 11: run<compressor<partition::whole, sparsify::dense, quantize::terngrad, feedback::none>>({.quantize = {.group = 4}}, options, payload, n); break;
    case 12: run<compressor<partition::whole, sparsify::topk, quantize::sign, feedback::none>>({.sparsify = {.density = 0.5}, .quantize = {.group = 4}}, options, payload, n); break;
    case 13: run<compressor<partition::whole, sparsify::dense, quantize::piecewise<3>, feedback::none>>({.quantize = {.group = 4}}, options, payload, n); break;
    case 5: run<compressor<partition::chunks, sparsify::dense, int_block<4, int_range::asymmetric>, feedback::none>>({.partition = {.chunk_bytes = 64}, .quantize = {.group = 4}}, options, payload, n); break;
    case 6: run<compressor<partition::whole, sparsify::topk, int_block<2>, feedback::none>>({.sparsify = {.density = 0.3}, .quantize = {.group = 2}}, options, payload, n); break;
    case 7: run<compressor<partition::whole, sparsify::dense, int_block<8>, feedback::none>>({.quantize = {.group = 8}}, options, payload, n); break;
    case 0: run<compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::none>>({.sparsify = {.density = 0.4}}, options, payload, n); break;
    case 1: run<compressor<partition::chunks, sparsify::dense, quantize::fp16, feedback::none>>({.partition = {.chunk_bytes = 6}}, options, payload, n); break;
    case 2: run<compressor<partition::chunks, sparsify::topk, quantize::none, feedback::residual>>({.partition = {.chunk_bytes = 400}}, options, payload, n); break;
    case 3: run<compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none>>({}, options, payload, n); break;
    default: run<compressor<partition::whole, sparsify::dense, quantize::none, feedback::none>>({}, options, payload, n); break;
  }
  return 0;
}
