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

namespace {


// A valid payload from the CPU backend.
template <class T, class C>
std::vector<std::byte> cpu_payload(const C& comp, std::size_t n, std::uint64_t seed) {
  gc::state st = comp.make_state(n);
  std::vector<std::byte> p(comp.template max_payload_bytes<T>(n));
  const std::vector<T> g = gctest::as_elements<T>(gctest::gradient(n, seed));
  const auto r = comp.template compress<T>(std::span<const T>(g), st, std::span<std::byte>(p));
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

}  // namespace

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
