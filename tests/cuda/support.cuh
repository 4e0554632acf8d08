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

// The CPU twin of a compressor for byte comparisons: the CUDA backend writes u32 index lists
// only, so the CPU reference does too.
template <class C>
C u32_lists(const C& comp) {
  auto cfg = comp.get_config();
  cfg.compact_indices = false;
  return C(cfg);
}

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
    const auto want = gctest::u32_lists(comp).template compress<T>(std::span<const T>(g), cpu, std::span<std::byte>(cpu_payload));
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

// A valid payload from the CPU backend.
template <class T, class C>
std::vector<std::byte> cpu_payload(const C& comp, std::size_t n, std::uint64_t seed) {
  gc::state st = comp.make_state(n);
  std::vector<std::byte> p(comp.template max_payload_bytes<T>(n));
  const std::vector<T> g = as_elements<T>(gradient(n, seed));
  const auto r = gctest::u32_lists(comp).template compress<T>(std::span<const T>(g), st, std::span<std::byte>(p));
  REQUIRE(r.ok());
  p.resize(*r);
  return p;
}

template <class T, class C>
void check_both(const C& comp, const std::vector<std::byte>& payload, std::size_t n, std::uint64_t seed) {
  check_decode<T>(comp, payload, n, false, seed);
  check_decode<T>(comp, payload, n, true, seed);
}

template <class V>
void put(std::vector<std::byte>& p, std::size_t at, V v) {
  std::memcpy(p.data() + at, &v, sizeof v);
}
template <class V>
V get(const std::vector<std::byte>& p, std::size_t at) {
  V v;
  std::memcpy(&v, p.data() + at, sizeof v);
  return v;
}

// Recomputes the CRC of every frame of a payload whose headers are intact (after tampering
// with a frame's body, so that the checks after the checksum are reached).
inline void reseal_all(std::vector<std::byte>& p) {
  for (std::size_t a = 0; a < p.size();) {
    const auto h = gc::frame::parse_header(p.data() + a, p.size() - a);
    REQUIRE(h.ok());
    gc::frame::seal(std::span<std::byte>(p.data() + a, h->frame_bytes()));
    a += h->frame_bytes();
  }
}

// Many corruptions of the first frame of a valid payload. Those marked `reseal` recompute the
// frame's CRC so that the checks after the checksum are reached. The expected errc is
// whatever the CPU says; the GPU must agree and leave the output untouched.
template <class T, class C>
void check_malformed(const C& comp, const std::vector<std::byte>& valid, std::size_t n) {
  const auto h = gc::frame::parse(valid);
  REQUIRE(h.ok());
  const std::size_t fb = h->frame_bytes();
  const auto reseal = [fb](std::vector<std::byte>& p) { gc::frame::seal(std::span<std::byte>(p.data(), fb)); };
  struct mutation {
    const char* name;
    void (*apply)(std::vector<std::byte>&, const gc::frame::header&);
    bool seal;
  };
  const mutation mutations[] = {
      {"truncated header", [](auto& p, const auto&) { p.resize(40); }, false},
      {"truncated body", [](auto& p, const auto&) { p.resize(p.size() - 8); }, false},
      {"bad magic", [](auto& p, const auto&) { p[0] ^= std::byte{1}; }, false},
      {"version", [](auto& p, const auto&) { put<std::uint16_t>(p, 4, 2); }, false},
      {"header size", [](auto& p, const auto&) { put<std::uint16_t>(p, 6, 96); }, false},
      {"reserved 20", [](auto& p, const auto&) { put<std::uint32_t>(p, 20, 1); }, true},
      {"reserved 80", [](auto& p, const auto&) { put<std::uint32_t>(p, 80, 1); }, true},
      {"flags", [](auto& p, const auto&) { put<std::uint16_t>(p, 14, 1); }, true},
      {"dtype", [](auto& p, const auto&) { put<std::uint8_t>(p, 12, 9); }, true},
      {"other dtype", [](auto& p, const auto&) { put<std::uint8_t>(p, 12, 2); }, true},
      {"index format", [](auto& p, const auto&) { put<std::uint8_t>(p, 13, 7); }, true},
      {"kept > dense", [](auto& p, const auto& h) { put<std::uint64_t>(p, 48, h.dense_count + 1); }, true},
      {"kept - 1", [](auto& p, const auto& h) { put<std::uint64_t>(p, 48, h.kept_count - 1); }, true},
      {"dense - 1", [](auto& p, const auto& h) { put<std::uint64_t>(p, 40, h.dense_count - 1); }, true},
      {"meta bytes", [](auto& p, const auto&) { put<std::uint64_t>(p, 56, 8); }, true},
      {"index bytes huge", [](auto& p, const auto&) { put<std::uint64_t>(p, 64, ~std::uint64_t{0} - 3); }, true},
      {"value bytes - 2", [](auto& p, const auto& h) { put<std::uint64_t>(p, 72, h.value_bytes - 2); }, true},
      {"codec id", [](auto& p, const auto&) { put<std::uint32_t>(p, 8, get<std::uint32_t>(p, 8) ^ 0x100u); }, true},
      {"chunk id", [](auto& p, const auto&) { put<std::uint32_t>(p, 16, 1u << 30); }, true},
      {"element offset", [](auto& p, const auto&) { put<std::uint64_t>(p, 32, 1); }, true},
      {"step (not resealed)", [](auto& p, const auto&) { put<std::uint64_t>(p, 24, 12345); }, false},
      {"crc", [](auto& p, const auto&) { p[84] ^= std::byte{0x80}; }, false},
      {"body bit", [](auto& p, const auto& h) { p[h.frame_bytes() - 1 - (h.frame_bytes() - 88) / 3] ^= std::byte{4}; }, false},
      {"last byte (padding or value)", [](auto& p, const auto& h) { p[h.frame_bytes() - 1] ^= std::byte{1}; }, true},
      {"index out of range", [](auto& p, const auto& h) {
         if (h.kept_count) put<std::uint32_t>(p, h.index_offset() + 4 * (h.kept_count - 1), static_cast<std::uint32_t>(h.dense_count));
       }, true},
      {"index huge at 0", [](auto& p, const auto& h) {
         if (h.kept_count) put<std::uint32_t>(p, h.index_offset(), 0xffffffffu);
       }, true},
      {"index repeated", [](auto& p, const auto& h) {
         if (h.kept_count > 1) put<std::uint32_t>(p, h.index_offset() + 4, get<std::uint32_t>(p, h.index_offset()));
       }, true},
      {"index descending late", [](auto& p, const auto& h) {
         if (h.kept_count > 3) put<std::uint32_t>(p, h.index_offset() + 4 * (h.kept_count - 1), 0);
       }, true},
      {"value NaN", [](auto& p, const auto& h) {
         if (h.kept_count) std::memset(p.data() + h.value_offset() + (h.value_bytes / 2 & ~std::size_t{3}), 0xff, 4);
       }, true},
      {"trailing zeros", [](auto& p, const auto&) { p.resize(p.size() + 8); }, false},
      {"frame twice", [](auto& p, const auto& h) { p.insert(p.end(), p.begin(), p.begin() + static_cast<long>(h.frame_bytes())); }, false},
  };
  for (const auto& m : mutations) {
    CAPTURE(m.name);
    std::vector<std::byte> p = valid;
    m.apply(p, *h);
    if (m.seal && p.size() >= fb) reseal(p);
    check_both<T>(comp, p, n, 99);
  }
}

// One compress of gradient g on both backends: the report's errc, the state and (when carried)
// the payload equal the CPU's.
template <class C>
void check_compress_once(const C& comp, const std::vector<float>& g) {
  const std::size_t n = g.size();
  gc::state cpu = comp.make_state(n);
  std::vector<std::byte> want(comp.template max_payload_bytes<float>(n));
  const auto w = gctest::u32_lists(comp).template compress<float>(g, cpu, want);
  device_bytes grad(4 * n), payload(want.size()), ws(gcu::compress_workspace_bytes<float>(comp, n)), sm(gcu::state_bytes(comp, n)),
      rep(sizeof(gcu::report));
  upload(grad, g);
  const auto st = gcu::make_state(comp, sm.span(), n);
  REQUIRE(st.ok());
  REQUIRE(gcu::compress<float>(comp, {nullptr, ws.span()}, std::span<const float>(grad.as<float>(), n), *st, payload.span(),
                               rep.as<gcu::report>())
              .ok());
  const gcu::report r = download<gcu::report>(rep, 1)[0];
  CHECK(r.error() == w.code());
  gc::state back = comp.make_state(n);
  REQUIRE(gcu::download_state(*st, back).ok());
  CHECK(back.step == cpu.step);
  CHECK(same_bits(back.residual, cpu.residual));
  if (w.ok()) {
    CHECK(r.bytes == *w);
    CHECK(download<std::byte>(payload, *w) == std::vector<std::byte>(want.begin(), want.begin() + static_cast<long>(*w)));
  }
}

// Four senders' payloads of gradients of n elements back to back (the all-gather case), of two
// compositions: decoded like the CPU, sums in payload order.
template <class A, class B>
void check_senders(const A& t, const B& c, std::size_t n) {
  std::vector<std::byte> pt, pc;
  for (std::uint64_t rank = 0; rank < 4; ++rank) {
    const auto a = cpu_payload<float>(t, n, 10 + rank), b = cpu_payload<float>(c, n, 20 + rank);
    pt.insert(pt.end(), a.begin(), a.end());
    pc.insert(pc.end(), b.begin(), b.end());
  }
  check_both<float>(t, pt, n, 7);
  check_both<gc::bf16_t>(t, pt, n, 8);
  check_both<float>(c, pc, n, 9);
}

// A quantizer for the code widths int_block lacks (any Bits in 1..32): codes straddle bytes
// and 32-bit words. Per group of `group` values: lo = min x, step = max/L - min/L with
// L = 2^min(Bits, 20) - 1 levels, code = round((x - lo) / step) XOR a fixed pattern in the
// code bits above 20, so that every packed bit is exercised. group 0: no groups, the fixed
// range of meta{}. check_meta rejects only NaN/inf and negative steps, so a frame may decode
// to infinity (the strict non-finite check). Not a real codec: tests only.
template <unsigned Bits>
struct odd_bits {
  static_assert(Bits >= 1 && Bits <= 32);
  using policy_kind = gc::quantizer_tag;
  static constexpr unsigned level_bits = Bits < 20 ? Bits : 20;
  static constexpr float levels = static_cast<float>((1u << level_bits) - 1u);
  static constexpr std::uint32_t code_mask = Bits == 32 ? 0xffffffffu : (1u << Bits) - 1u;
  static constexpr std::uint32_t pattern = 0xA5A5A5A5u & code_mask & ~0xfffffu;
  struct config {
    std::size_t group = 64;  // 0 or a power of two up to 4096
    gc::quantize::rounding round = gc::quantize::rounding::nearest;
  };
  struct meta {
    float lo = -0.015625f;
    float step = 0.03125f / levels;
  };
  using code_type = std::uint32_t;
  static constexpr unsigned bits = Bits;
  static constexpr std::uint8_t id = 0xfe;  // a test policy: in the range left to users (core/ids.hpp)
  static constexpr bool summable = false;
  static constexpr std::size_t meta_bytes = 8;

  static gc::status validate(const config& c) {
    if (c.group != 0 && !gc::quantize::valid_group_size(c.group)) return {gc::errc::invalid_argument, "odd_bits: group"};
    return {};
  }
  static constexpr std::uint16_t format_param(const config& c) {
    return static_cast<std::uint16_t>((c.group ? gc::quantize::group_param(c.group) : 0x800u) |
                                      (c.round == gc::quantize::rounding::stochastic ? 0x400u : 0u) | Bits);
  }
  static constexpr bool unbiased(const config& c) { return c.round == gc::quantize::rounding::stochastic; }
  GRADCOMP_HD static bool stochastic(const config& c) { return c.round == gc::quantize::rounding::stochastic; }
  GRADCOMP_HD static std::size_t group_size(const config& c) { return c.group; }

  GRADCOMP_HD static meta fit(const config&, const float* x, std::size_t n) {
    float lo = x[0], hi = x[0];
    for (std::size_t i = 1; i < n; ++i) {
      lo = x[i] < lo ? x[i] : lo;
      hi = x[i] > hi ? x[i] : hi;
    }
    return {lo, hi / levels - lo / levels};
  }
  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t random) {
    const float y = gc::clamp_float(m.step > 0.0f ? (x - m.lo) / m.step : 0.0f, 0.0f, levels);
    const float q = c.round == gc::quantize::rounding::stochastic ? gc::round_stochastic(y, random) : gc::round_even(y);
    return static_cast<code_type>(q) ^ pattern;
  }
  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    return m.lo + static_cast<float>(code ^ pattern) * m.step;
  }
  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    gc::store_le<std::uint32_t>(out, gc::float_bits(m.lo));
    gc::store_le<std::uint32_t>(out + 4, gc::float_bits(m.step));
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    return {gc::bits_float(gc::load_le<std::uint32_t>(in)), gc::bits_float(gc::load_le<std::uint32_t>(in + 4))};
  }
  GRADCOMP_HD static gc::status check_meta(const config&, const meta& m) {
    if (!gc::is_finite_bits(gc::float_bits(m.lo)) || !gc::is_finite_bits(gc::float_bits(m.step)))
      return {gc::errc::non_finite_value, "odd_bits: lo or step is NaN or inf"};
    if (gc::float_bits(m.step) >> 31) return {gc::errc::bad_meta, "odd_bits: negative step"};
    return {};
  }
};

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

// Grouped quantizers (the grouped path, cuda/groups.cuh).
using int8 = gc::quantize::int_block<8>;
using int4a = gc::quantize::int_block<4, gc::quantize::int_range::asymmetric>;
using int2 = gc::quantize::int_block<2>;
using dense_int8 = whole<gc::sparsify::dense, int8, gc::feedback::none>;
using chunks_dense_int4a_res = chunked<gc::sparsify::dense, int4a, gc::feedback::residual>;
using chunks_dense_int2_res = chunked<gc::sparsify::dense, int2, gc::feedback::residual>;
using topk_int8_res = whole<gc::sparsify::topk, int8, gc::feedback::residual>;
using chunks_topk_int4a = chunked<gc::sparsify::topk, int4a, gc::feedback::none>;
using chunks_topk_int2_res = chunked<gc::sparsify::topk, int2, gc::feedback::residual>;
template <unsigned Bits>
using chunks_dense_odd_res = chunked<gc::sparsify::dense, odd_bits<Bits>, gc::feedback::residual>;
template <unsigned Bits>
using chunks_topk_odd = chunked<gc::sparsify::topk, odd_bits<Bits>, gc::feedback::none>;
}  // namespace codecs

}  // namespace gctest
