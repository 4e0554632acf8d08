// One side of an in-process A/B comparison (tools/ab/ab.sh). Compiled once per version of
// the headers, with -Dgradcomp=<unique namespace> so that two versions link into one binary
// without clashing, and -DAB_ENTRY=<unique function name>.
#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

extern "C" void* ab_shared(int which, std::size_t bytes);  // ab_main.cpp

namespace {
namespace gc = gradcomp;  // (the namespace the -D above renamed)

struct runner {
  virtual ~runner() = default;
  // op: 0 compress, 1 decompress, 2 accumulate, 3 compress without a previous threshold.
  virtual double run(int op) = 0;
};

template <class Codec>
struct codec_runner final : runner {
  Codec codec;
  std::span<const float> grad;
  gc::state st;
  std::vector<std::byte> payload;  // this side's frames, for decompress and accumulate
  std::size_t written = 0;
  std::size_t offset;  // frames start this many bytes into the shared buffer

  codec_runner(const typename Codec::config& c, const float* g, std::size_t n, std::size_t at)
      : codec(c), grad(g, n), st(codec.make_state(n)), payload(codec.template max_payload_bytes<float>(n)), offset(at) {
    written = *codec.template compress<float>(grad, st, payload);
  }
  double run(int op) override {
    if (op == 3) std::fill(st.thresholds.begin(), st.thresholds.end(), 0.0f);
    auto* shared = static_cast<std::byte*>(ab_shared(0, payload.size() + offset)) + offset;
    const std::span<float> to(static_cast<float*>(ab_shared(1, grad.size() * sizeof(float))), grad.size());
    if (op == 1 || op == 2) std::memcpy(shared, payload.data(), written);
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const std::byte> frames(shared, written);
    if (op == 1) {
      (void)codec.template decompress<float>(frames, to);
    } else if (op == 2) {
      (void)codec.template accumulate<float>(frames, to);
    } else {
      (void)codec.template compress<float>(grad, st, std::span(shared, payload.size()));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

template <class S, class Q, class F = gc::feedback::none>
using codec = gc::compressor<gc::partition::whole, S, Q, F>;

template <class Codec>
std::unique_ptr<runner> make(const typename Codec::config& c, const float* g, std::size_t n, std::size_t offset = 0) {
  return std::make_unique<codec_runner<Codec>>(c, g, n, offset);
}

using namespace gc::quantize;
using gc::sparsify::dense;
using gc::sparsify::threshold;
using gc::sparsify::topk;
using residual = gc::feedback::residual;

// The cases: a name and a codec. Keep the order (case numbers are the interface).
std::unique_ptr<runner> make_case(int id, const float* g, std::size_t n, const char** name) {
  switch (id) {
    case 0: *name = "int8"; return make<codec<dense, int_block<8>>>({}, g, n);
    case 1: *name = "int4"; return make<codec<dense, int_block<4>>>({}, g, n);
    case 2: *name = "sign"; return make<codec<dense, sign>>({}, g, n);
    case 3: *name = "bf16"; return make<codec<dense, bf16>>({}, g, n);
    case 4: *name = "int8_stochastic"; return make<codec<dense, int_block<8>>>({.quantize = {.round = rounding::stochastic}}, g, n);
    case 5: *name = "terngrad"; return make<codec<dense, terngrad>>({}, g, n);
    case 6: *name = "qsgd4"; return make<codec<dense, qsgd<4>>>({}, g, n);
    case 7: *name = "fp8_e4m3"; return make<codec<dense, fp8_e4m3>>({}, g, n);
    case 8: *name = "int8+residual"; return make<codec<dense, int_block<8>, residual>>({}, g, n);
    case 9: *name = "bf16+residual"; return make<codec<dense, bf16, residual>>({}, g, n);
    case 10: *name = "topk1%"; return make<codec<topk, bf16>>({.sparsify = {.density = 0.01}}, g, n);
    case 11: *name = "topk1%+residual"; return make<codec<topk, bf16, residual>>({.sparsify = {.density = 0.01}}, g, n);
    case 12: *name = "dgc1%"; return make<codec<threshold, bf16>>({.sparsify = {.density = 0.01}}, g, n);
    case 13:
      *name = "tagc1%";
      return make<codec<threshold, bf16>>({.sparsify = {.density = 0.01, .estimate = threshold::rule::tagc}}, g, n);
    case 14: *name = "dgc0.1%"; return make<codec<threshold, bf16>>({.sparsify = {.density = 0.001}}, g, n);
    case 15:
      *name = "tagc0.1%";
      return make<codec<threshold, bf16>>({.sparsify = {.density = 0.001, .estimate = threshold::rule::tagc}}, g, n);
    case 16: *name = "natural"; return make<codec<dense, natural>>({}, g, n);
    case 17: *name = "int2_stochastic"; return make<codec<dense, int_block<2>>>({.quantize = {.round = rounding::stochastic}}, g, n);
    case 18: *name = "piecewise4"; return make<codec<dense, piecewise<4>>>({}, g, n);
    case 19: *name = "fp8_e5m2"; return make<codec<dense, fp8_e5m2>>({}, g, n);
    case 20: *name = "int4_asym"; return make<codec<dense, int_block<4, int_range::asymmetric>>>({}, g, n);
    case 21: *name = "fp8_e4m3_scaled128"; return make<codec<dense, fp8_e4m3>>({.quantize = {.group = 128}}, g, n);
    case 22: *name = "int8_at8"; return make<codec<dense, int_block<8>>>({}, g, n, 8);  // frames 8 bytes off alignment
    case 23: *name = "fp16"; return make<codec<dense, fp16>>({}, g, n);
    case 24: *name = "fp32"; return make<codec<dense, none>>({}, g, n);
    default: return nullptr;
  }
}
}  // namespace

// Runs operation `op` of case `id` once on g[0, n) and returns its seconds (< 0: no such
// case). The codec, its state and buffers are made on first use and kept.
extern "C" double AB_ENTRY(int id, int op, const float* g, std::size_t n, const char** name) {
  static std::map<int, std::pair<std::unique_ptr<runner>, const char*>> made;
  auto& [r, case_name] = made[id];
  if (!r) r = make_case(id, g, n, &case_name);
  *name = case_name;
  return r ? r->run(op) : -1.0;
}
