#pragma once
// Helpers of the CUDA tests: device buffers, test gradients, and the CPU-vs-GPU comparisons
// every configuration runs (payload bytes, residual, step, decoded values, error kinds).

#include <doctest/doctest.h>

#include <gradcomp/cuda.cuh>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace gctest {

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;

#define GC_CUDA_CHECK(expr)                                                  \
  do {                                                                       \
    const cudaError_t gc_err_ = (expr);                                      \
    REQUIRE_MESSAGE(gc_err_ == cudaSuccess, cudaGetErrorString(gc_err_));    \
  } while (0)

// Device memory of `bytes` bytes (at least 256 so that even empty buffers have an address).
class device_bytes {
 public:
  explicit device_bytes(std::size_t bytes = 0) : size_(bytes) {
    GC_CUDA_CHECK(cudaMalloc(&p_, bytes < 256 ? 256 : bytes));
  }
  ~device_bytes() { cudaFree(p_); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }
  std::size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data(), size_}; }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  std::size_t size_;
};

template <class T>
void upload(const device_bytes& d, const std::vector<T>& h) {
  REQUIRE(d.size() >= h.size() * sizeof(T));
  if (!h.empty()) GC_CUDA_CHECK(cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const device_bytes& d, std::size_t count) {
  std::vector<T> h(count);
  if (count) GC_CUDA_CHECK(cudaMemcpy(h.data(), d.data(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Deterministic pseudo-random numbers (xorshift64*), so failures reproduce.
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  float normal() {  // sum of uniforms: bell-shaped, enough for gradients
    float a = 0;
    for (int i = 0; i < 4; ++i) a += uniform();
    return (a - 2.0f) * 1.7f;
  }
};

// Gradient-like values with what trips up selection and rounding: repeated magnitudes (ties),
// exact zeros, both signs of equal values, tiny (subnormal) values; optionally huge ones
// (fp16 overflow to infinity) and NaN / infinity.
// NaN made by the shared arithmetic is canonical (gradcomp::canonical_nan), so every result
// is compared bit for bit, NaN included.
inline std::vector<float> gradient(std::size_t n, std::uint64_t seed, bool with_non_finite = false, bool huge = false) {
  rng r{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t kind = r.next() % 16;
    float v = r.normal() * 1e-3f;
    if (kind == 0) v = 0.0f;
    if (kind == 1) v = (r.next() & 1 ? 1.0f : -1.0f) * 0.0025f;  // a heavily tied magnitude
    if (kind == 2) v = r.normal() * 1e-40f;                      // subnormal
    if (kind == 3 && huge && r.next() % 64 == 0) v = 7e4f;       // beyond fp16
    g[i] = v;
  }
  if (with_non_finite && n > 0) {
    g[n / 2] = std::numeric_limits<float>::infinity();
    g[n / 3] = std::numeric_limits<float>::quiet_NaN();
  }
  return g;
}

template <class T>
std::vector<T> as_elements(const std::vector<float>& f) {
  std::vector<T> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) out[i] = gc::from_float<T>(f[i]);
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// First differing byte, for messages.
inline std::size_t first_difference(std::span<const std::byte> a, std::span<const std::byte> b) {
  const std::size_t n = a.size() < b.size() ? a.size() : b.size();
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return n;
}

// Compresses `steps` gradients of n elements on the CPU and the GPU; the payloads, the step
// and the residual must be identical after every step. Returns the last CPU payload.
template <class T, class C>
std::vector<std::byte> check_compress(const C& comp, std::size_t n, int steps, std::uint64_t seed, bool huge = false) {
  CAPTURE(n);
  gc::state cpu = comp.make_state(n);
  const std::size_t max_bytes = comp.template max_payload_bytes<T>(n);
  std::vector<std::byte> cpu_payload(max_bytes);

  device_bytes state_mem(gcu::state_bytes(comp, n));
  const auto st = gcu::make_state(comp, state_mem.span(), n);
  REQUIRE(st.ok());
  device_bytes ws(gcu::compress_workspace_bytes<T>(comp, n));
  device_bytes grad(n * sizeof(T)), payload(max_bytes);
  const gcu::executor ex{nullptr, ws.span()};

  std::size_t last = 0;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const std::vector<T> g = as_elements<T>(gradient(n, seed + static_cast<std::uint64_t>(step), false, huge));
    upload(grad, g);
    const auto want = comp.template compress<T>(std::span<const T>(g), cpu, std::span<std::byte>(cpu_payload));
    const auto got = gcu::compress<T>(comp, ex, std::span<const T>(grad.as<const T>(), n), *st, payload.span());
    REQUIRE(want.ok());
    REQUIRE_MESSAGE(got.ok(), gc::to_string(got.code()));
    REQUIRE(*got == *want);
    const auto bytes = download<std::byte>(payload, *got);
    const std::span<const std::byte> a(cpu_payload.data(), *want), b(bytes.data(), bytes.size());
    CHECK_MESSAGE(first_difference(a, b) == *want, "payload bytes differ at ", first_difference(a, b));
    last = *want;
  }
  gc::state back = comp.make_state(n);
  REQUIRE(gcu::download_state(*st, back).ok());
  CHECK(back.step == cpu.step);
  CHECK(same_bits(back.residual, cpu.residual));
  cpu_payload.resize(last);
  return cpu_payload;
}

// Decodes a (possibly malformed) payload on both backends into the same starting buffer;
// the status codes and the resulting buffers must be identical (untouched on error).
template <class T, class C>
void check_decode(const C& comp, std::span<const std::byte> payload, std::size_t n, bool add, std::uint64_t seed) {
  CAPTURE(n);
  CAPTURE(add);
  CAPTURE(payload.size());
  const std::vector<T> start = as_elements<T>(gradient(n, seed ^ 0xabcdef));
  std::vector<T> cpu = start;
  const gc::status want = add ? comp.template accumulate<T>(payload, std::span<T>(cpu))
                              : comp.template decompress<T>(payload, std::span<T>(cpu));

  device_bytes ws(gcu::decode_workspace_bytes<T>(comp, n, gcu::max_frames(payload.size())));
  device_bytes in(payload.size()), out(n * sizeof(T));
  if (!payload.empty()) GC_CUDA_CHECK(cudaMemcpy(in.data(), payload.data(), payload.size(), cudaMemcpyHostToDevice));
  upload(out, start);
  const gcu::executor ex{nullptr, ws.span()};
  const std::span<const std::byte> d_payload(in.data(), payload.size());
  const std::span<T> d_out(out.as<T>(), n);
  const gc::status got = add ? gcu::accumulate<T>(comp, ex, d_payload, d_out) : gcu::decompress<T>(comp, ex, d_payload, d_out);
  CHECK_MESSAGE(got.code() == want.code(), "gpu: ", gc::to_string(got.code()), ", cpu: ", gc::to_string(want.code()));
  const std::vector<T> gpu = download<T>(out, n);
  if (add) {
    CHECK(same_bits(gpu, cpu));
  } else {
    CHECK(same_bits(gpu, cpu));
  }
  if (!want.ok()) CHECK(same_bits(gpu, start));
}

// The compositions the GPU tests run.
namespace codecs {
template <class S, class Q, class F>
using whole = gc::compressor<gc::partition::whole, S, Q, F>;
template <class S, class Q, class F>
using chunked = gc::compressor<gc::partition::chunks, S, Q, F>;

using dense_bf16 = whole<gc::sparsify::dense, gc::quantize::bf16, gc::feedback::none>;
using dense_none_res = whole<gc::sparsify::dense, gc::quantize::none, gc::feedback::residual>;
using chunks_dense_fp16_res = chunked<gc::sparsify::dense, gc::quantize::fp16, gc::feedback::residual>;
using topk_bf16_res = whole<gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual>;
using chunks_topk_none = chunked<gc::sparsify::topk, gc::quantize::none, gc::feedback::none>;
using chunks_topk_fp16_res = chunked<gc::sparsify::topk, gc::quantize::fp16, gc::feedback::residual>;
}  // namespace codecs

}  // namespace gctest
