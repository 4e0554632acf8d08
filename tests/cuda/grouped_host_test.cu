// Host-side checks of the CUDA grouped path (test suite "host": no GPU needed). The phases of
// encode_groups_kernel, the padding rule of seal_kernel and the decode checks of check_kernel
// and apply_range are GRADCOMP_HD functions of (thread, thread count) in cuda/groups.cuh;
// here they run for every span and every simulated thread in turn, and the frames, residuals,
// error kinds and decoded values must equal the CPU backend's, byte for byte. The kernels call
// the same functions with threadIdx.x; what only a GPU run checks is their skeleton (barriers,
// grids, shared-memory sizes).

#include <algorithm>
#include <limits>

#include "support.cuh"

namespace gc = gradcomp;
namespace d = gradcomp::cuda::detail;
using namespace gctest::codecs;
using gctest::odd_bits;
using gctest::put;
using gctest::reseal_all;

namespace {

const d::crc_tables& tables() {
  static const d::crc_tables t = d::make_crc_tables();
  return t;
}

// seal_kernel and header_kernel on the host: padding masked in place, body CRC from shifted
// tile terms, joined with the header's CRC.
void model_seal(std::byte* f, const gc::frame::header& h) {
  const std::uint64_t body = h.frame_bytes() - gc::frame::header_bytes;
  std::uint32_t acc = 0;
  for (std::uint64_t begin = 0; begin < body; begin += d::tile_bytes) {
    const auto r = static_cast<std::uint32_t>(std::min<std::uint64_t>(d::tile_bytes, body - begin));
    std::vector<std::uint32_t> words(r / 4);
    for (std::uint32_t w = 0; w < r / 4; ++w) {
      std::byte* p = f + gc::frame::header_bytes + begin + 4 * w;
      std::uint32_t v = gc::load_le<std::uint32_t>(p);
      if (const std::uint32_t keep = d::body_keep_mask(h, begin + 4 * w); keep != 0xffffffffu) {
        v &= keep;
        gc::store_le<std::uint32_t>(p, v);
      }
      words[w] = v;
    }
    acc ^= d::crc_shift(tables(), d::tile_crc_model(tables(), words.data(), r), body - begin - r);
  }
  const std::uint32_t head = gc::crc32c(std::span<const std::byte>(f, gc::frame::crc_offset));
  gc::store_le<std::uint32_t>(f + gc::frame::crc_offset, gc::crc32c_combine(head, acc, body));
}

// The GPU's frame for the chunk of CPU frame `cpu` (same header fields), written into f (whose
// bytes start as garbage): header, indices copied from the CPU frame (the selection is checked
// elsewhere), then every span's four phases with nt simulated threads, then the seal. `e` is the
// model's residual, updated as the kernels update it.
template <class C, class T>
void model_frame(const C& comp, const std::vector<T>& g, std::vector<float>& e, const std::byte* cpu, std::byte* f,
                 unsigned nt) {
  using Q = typename C::quantizer;
  using F = typename C::feedback;
  constexpr bool dense = C::sparsifier::is_dense;
  const auto& cfg = comp.get_config();
  const gc::frame::header h = *gc::frame::parse_header(cpu, gc::frame::header_bytes + (std::uint64_t{1} << 40));
  gc::frame::header mh = d::section_layout<C>(cfg, h.kept_count, h.dense_count);
  mh.codec_id = comp.codec_id();
  mh.source_dtype = gc::dtype_of<T>;
  mh.chunk_id = h.chunk_id;
  mh.step = h.step;
  mh.element_offset = h.element_offset;
  gc::frame::write_header(mh, f);
  const std::size_t off = h.element_offset;
  std::vector<std::uint32_t> idx(h.kept_count);
  if constexpr (!dense) {
    std::memcpy(f + mh.index_offset(), cpu + h.index_offset(), 4 * h.kept_count);
    if (h.kept_count) std::memcpy(idx.data(), cpu + h.index_offset(), 4 * h.kept_count);
    if constexpr (F::has_state)  // hist_kernel<0> stores x = combine(g, e) for the whole chunk
      for (std::size_t j = 0; j < h.dense_count; ++j) e[off + j] = F::combine(cfg.feedback, gc::to_float(g[off + j]), e[off + j]);
  }
  const std::uint32_t span = d::span_values<Q>(Q::group_size(cfg.quantize));
  std::vector<float> xs(d::span_slots, std::numeric_limits<float>::quiet_NaN());
  std::vector<typename Q::code_type> codes(d::max_span);
  std::vector<std::uint32_t> metas(d::span_min<Q> * d::meta_words<Q>);
  for (std::uint64_t m0 = 0; m0 < h.kept_count; m0 += span) {
    const d::span_work<C, T> w{cfg,
                               g.data() + off,
                               F::has_state ? e.data() + off : nullptr,
                               dense ? nullptr : idx.data(),
                               f,
                               mh.value_offset(),
                               m0,
                               static_cast<std::uint32_t>(std::min<std::uint64_t>(span, h.kept_count - m0)),
                               h.chunk_id,
                               h.step};
    for (unsigned t = 0; t < nt; ++t) d::span_load(w, xs.data(), t, nt);
    for (unsigned t = 0; t < nt; ++t) d::span_fit(w, xs.data(), metas.data(), t, nt);
    for (unsigned t = 0; t < nt; ++t) d::span_encode(w, xs.data(), metas.data(), codes.data(), t, nt);
    for (unsigned t = 0; t < nt; ++t) d::span_store(w, codes.data(), t, nt);
  }
  model_seal(f, mh);
}

// `steps` compressions on the CPU and through the model: payloads and residuals must agree.
template <class T, class C>
void check_model(const C& comp, std::size_t n, int steps, std::uint64_t seed, unsigned nt = d::threads) {
  CAPTURE(n);
  CAPTURE(nt);
  gc::state cpu = comp.make_state(n);
  std::vector<float> e(C::feedback::has_state ? n : 0, 0.0f);
  std::vector<std::byte> payload(comp.template max_payload_bytes<T>(n));
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const std::vector<T> g = gctest::as_elements<T>(gctest::gradient(n, seed + static_cast<std::uint64_t>(step)));
    const auto want = gctest::u32_lists(comp).template compress<T>(std::span<const T>(g), cpu, std::span<std::byte>(payload));
    REQUIRE(want.ok());
    std::vector<std::byte> model(*want, std::byte{0xa5});
    for (std::size_t at = 0; at < *want;) {
      const auto h = gc::frame::parse(std::span<const std::byte>(payload.data() + at, *want - at));
      REQUIRE(h.ok());
      model_frame<C, T>(comp, g, e, payload.data() + at, model.data() + at, nt);
      at += h->frame_bytes();
    }
    const std::span<const std::byte> a(payload.data(), *want), b(model.data(), model.size());
    CHECK_MESSAGE(gctest::first_difference(a, b) == *want, "frame bytes differ at ", gctest::first_difference(a, b));
    CHECK(gctest::same_bits(e, cpu.residual));
  }
}

// check_kernel's grouped checks and apply_range's value_at over a payload of well-formed
// headers (metadata or values possibly tampered with, CRC resealed): the errc must be the
// CPU's decompress outcome, and on success the decoded values must be the CPU's.
template <class C>
void check_decode_model(const C& comp, const std::vector<std::byte>& payload, std::size_t n, unsigned nt = d::threads) {
  const auto& qc = comp.get_config().quantize;
  std::vector<float> want_out(n, 1.0f);
  const gc::status want = comp.template decompress<float>(payload, std::span<float>(want_out));
  gc::errc got = gc::errc::ok;
  std::vector<float> out(n, 1.0f);
  for (std::size_t at = 0; at < payload.size();) {
    const auto h = gc::frame::parse(std::span<const std::byte>(payload.data() + at, payload.size() - at));
    REQUIRE(h.ok());
    REQUIRE(C::check_frame_header(comp.get_config(), comp.codec_id(), *h, n).ok());
    const std::byte* f = payload.data() + at;
    const std::uint64_t body = h->frame_bytes() - gc::frame::header_bytes;
    std::uint64_t bad = ~std::uint64_t{0};
    bool non_finite = false;
    for (std::uint64_t begin = 0; begin < body; begin += d::tile_bytes) {
      const std::uint64_t end = std::min<std::uint64_t>(body, begin + d::tile_bytes);
      for (unsigned t = 0; t < nt; ++t) {
        bad = std::min(bad, d::meta_errors<C>(qc, f, h->kept_count, begin, end, t, nt));
        if (!comp.get_config().allow_non_finite)
          non_finite = non_finite || d::non_finite_in<C>(qc, f, h->value_offset(), h->kept_count, begin, end, t, nt);
      }
    }
    const gc::errc code = bad != ~std::uint64_t{0} ? static_cast<gc::errc>(bad & 0xffu)
                                                   : (non_finite ? gc::errc::non_finite_value : gc::errc::ok);
    if (got == gc::errc::ok) got = code;
    float* region = out.data() + h->element_offset;
    if constexpr (C::sparsifier::is_dense) {
      for (std::uint64_t j = 0; j < h->dense_count; ++j) region[j] = d::value_at<C>(qc, f, h->value_offset(), j);
    } else {
      for (std::uint64_t j = 0; j < h->dense_count; ++j) region[j] = 0.0f;
      for (std::uint64_t m = 0; m < h->kept_count; ++m)
        region[gc::load_le<std::uint32_t>(f + h->index_offset() + 4 * m)] = d::value_at<C>(qc, f, h->value_offset(), m);
    }
    at += h->frame_bytes();
  }
  CHECK_MESSAGE(got == want.code(), "model: ", gc::to_string(got), ", cpu: ", gc::to_string(want.code()));
  if (want.ok()) CHECK(gctest::same_bits(out, want_out));
}

template <unsigned Bits>
void check_pack_width() {
  CAPTURE(Bits);
  gctest::rng r{Bits};
  for (std::uint32_t n : {0u, 1u, 2u, 3u, 7u, 8u, 31u, 32u, 33u, 63u, 64u, 65u, 100u, 1000u, 4096u}) {
    CAPTURE(n);
    std::vector<std::uint32_t> codes(n);
    for (auto& c : codes) c = static_cast<std::uint32_t>(r.next() >> 32);  // high bits set: pack must mask them
    std::vector<std::byte> want(gc::packed_bytes(n, Bits) + 4, std::byte{0});
    gc::pack_bits(codes, Bits, want.data());
    const auto words = static_cast<std::uint32_t>((std::uint64_t{n} * Bits + 31) / 32);
    std::vector<std::byte> got(4 * std::size_t{words} + 4, std::byte{0});
    for (std::uint32_t w = 0; w < words; ++w) d::store_word(got.data() + 4 * w, d::pack_word<Bits>(codes.data(), n, w));
    want.resize(got.size());  // the bits after the last code are zero on both sides
    CHECK(got == want);
  }
}

template <class C>
void check_keep_mask(const C& comp, std::size_t kept, std::size_t count) {
  const gc::frame::header h = comp.layout(kept, count);
  std::vector<std::byte> want(h.frame_bytes(), std::byte{0xff}), got = want;
  gc::frame::zero_padding(h, want.data());
  for (std::uint64_t b = 0; b + 4 <= h.frame_bytes() - gc::frame::header_bytes; b += 4) {
    std::byte* p = got.data() + gc::frame::header_bytes + b;
    gc::store_le<std::uint32_t>(p, gc::load_le<std::uint32_t>(p) & d::body_keep_mask(h, b));
  }
  CHECK(got == want);
}

const std::size_t model_sizes[] = {0, 1, 2, 3, 7, 255, 1023, 1024, 1025, 3001, 4097, 9000};

}  // namespace

TEST_SUITE("host") {

TEST_CASE("grouped path: pack_word packs as pack_bits, every code width") {
  check_pack_width<1>();
  check_pack_width<2>();
  check_pack_width<3>();
  check_pack_width<4>();
  check_pack_width<5>();
  check_pack_width<7>();
  check_pack_width<8>();
  check_pack_width<12>();
  check_pack_width<13>();
  check_pack_width<16>();
  check_pack_width<17>();
  check_pack_width<24>();
  check_pack_width<31>();
  check_pack_width<32>();
}

template <class Q>
void check_geometry() {
  static_assert(d::span_min<Q> % 32 == 0 && d::span_min<Q> >= 32 && d::span_min<Q> <= d::max_span);
  for (std::size_t gs = 0; gs <= gc::max_group_size; gs = gs ? 2 * gs : 1) {
    CAPTURE(gs);
    REQUIRE(d::span_group_ok(gs));
    const std::uint32_t span = d::span_values<Q>(gs);
    CHECK(span % 32 == 0);  // codes of every span start on a 32-bit word, whatever the width
    CHECK(span >= d::span_min<Q>);
    CHECK(span <= d::max_span);
    if (gs == 0) continue;
    const auto g = static_cast<std::uint32_t>(gs);
    CHECK(span % g == 0);
    CHECK(span / g <= d::span_min<Q>);  // groups per span fit the shared metadata
    CHECK(d::slot(span - 1, g) < d::span_slots);
    for (std::uint32_t q = 0; q < span / g; q += 1 + span / g / 64)
      for (std::uint32_t k = 0; k < g; k += 1 + g / 16) CHECK(d::slot(q * g + k, g) == d::slot(q * g, g) + k);  // contiguous
    if (g >= 2 && span / g >= 32) {  // 32 threads fitting consecutive groups start in 32 banks
      std::vector<bool> bank(32, false);
      for (std::uint32_t q = 0; q < 32; ++q) bank[d::slot(q * g, g) % 32] = true;
      CHECK(std::count(bank.begin(), bank.end(), true) == 32);
    }
  }
}

// A quantizer with wide metadata (40 bytes per group, 32-bit codes): its spans are shorter,
// so that 256 groups of metadata fit beside the staged values and codes.
struct wide_meta : odd_bits<8> {
  struct meta {
    float v[10];
  };
};

TEST_CASE("grouped path: span geometry") {
  check_geometry<int8>();
  check_geometry<odd_bits<32>>();
  check_geometry<wide_meta>();
  CHECK(d::span_min<int8> == 1024);
  CHECK(d::span_min<odd_bits<32>> == 1024);
  CHECK(d::span_min<wide_meta> == 256);
  CHECK_FALSE(d::span_group_ok(3));
  CHECK_FALSE(d::span_group_ok(8192));
}

TEST_CASE("grouped path: one Philox call gives random16_at of 8 values") {
  for (std::uint64_t base : {std::uint64_t{0}, std::uint64_t{1} << 35}) {
    for (std::uint64_t m = base; m < base + 200; ++m) {
      const auto r = d::octet_philox(12345u, 0x100000007ull, 3u, m / 8);
      CHECK(d::octet_random(r, static_cast<unsigned>(m % 8)) ==
            gc::random16_at(12345u, 0x100000007ull, 3u, gc::random_stream::quantizer, m));
    }
  }
}

TEST_CASE("grouped path: body_keep_mask zeroes exactly the section padding") {
  const chunks_topk_int4a topk({.quantize = {.group = 4}});
  const dense_int8 dense({.quantize = {.group = 1}});
  const chunks_dense_odd_res<13> odd({.quantize = {.group = 2}});
  for (std::size_t count : {0u, 1u, 2u, 3u, 5u, 7u, 8u, 9u, 100u, 1001u}) {
    for (std::size_t kept : {std::size_t{0}, std::size_t{1}, count / 3, count}) {
      if (kept > count) continue;
      CAPTURE(count);
      CAPTURE(kept);
      check_keep_mask(topk, kept, count);
      check_keep_mask(dense, count, count);
      check_keep_mask(odd, count, count);
    }
  }
}

TEST_CASE("grouped path: section layout and plan totals") {
  const chunks_topk_int2_res sparse({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.03}, .quantize = {.group = 2}});
  const chunks_dense_int4a_res dense({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 64}});
  for (std::size_t count : {0u, 1u, 7u, 1000u, 65535u})
    for (std::size_t kept : {std::size_t{0}, std::size_t{1}, count / 2, count}) {
      if (kept > count) continue;
      CHECK(d::section_layout<chunks_topk_int2_res>(sparse.get_config(), kept, count).frame_bytes() ==
            sparse.layout(kept, count).frame_bytes());
      CHECK(d::section_layout<chunks_dense_int4a_res>(dense.get_config(), count, count).meta_bytes ==
            dense.layout(count, count).meta_bytes);
    }
  for (std::size_t n : {0u, 1u, 1025u, 100003u}) {
    CAPTURE(n);
    const auto a = d::plan_on_host<chunks_topk_int2_res, float>(sparse, n);
    CHECK(a.total.frame == sparse.max_payload_bytes<float>(n));
    const auto b = d::plan_on_host<chunks_dense_int4a_res, gc::bf16_t>(dense, n);
    CHECK(b.total.frame == dense.max_payload_bytes<gc::bf16_t>(n));
    std::uint64_t spans = 0;
    for (std::size_t c = 0; c < dense.chunk_count<gc::bf16_t>(n); ++c)
      spans += (dense.chunk<gc::bf16_t>(n, c).count + d::span_min<int4a> - 1) / d::span_min<int4a>;
    CHECK(b.total.span == spans);
    CHECK(b.total.val == 0);  // the fast path's tiles are not used
  }
}

TEST_CASE("grouped path model: int_block dense frames equal the CPU's") {
  using gc::quantize::rounding;
  for (std::size_t group : {std::size_t{1}, std::size_t{2}, std::size_t{128}, std::size_t{4096}})
    for (rounding round : {rounding::nearest, rounding::stochastic}) {
      CAPTURE(group);
      CAPTURE(static_cast<int>(round));
      const dense_int8 a({.quantize = {.group = group, .round = round}, .seed = 7});
      for (std::size_t n : model_sizes) check_model<float>(a, n, 2, 1);
      const chunks_dense_int4a_res b({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group, .round = round}});
      for (std::size_t n : model_sizes) check_model<float>(b, n, 3, 2);
      check_model<gc::bf16_t>(b, 20000, 2, 3);
      const chunks_dense_int2_res c({.partition = {.chunk_bytes = 40}, .quantize = {.group = group, .round = round}});
      for (std::size_t n : {0u, 1u, 9u, 10u, 11u, 1000u}) check_model<float>(c, n, 2, 4);
    }
  // Another thread count: the phases' results must not depend on it.
  const chunks_dense_int2_res c({.quantize = {.group = 2, .round = gc::quantize::rounding::stochastic}});
  check_model<float>(c, 5000, 2, 5, 3);
  check_model<float>(c, 5000, 2, 5, 1);
}

TEST_CASE("grouped path model: int_block top-k frames and residuals equal the CPU's") {
  using gc::quantize::rounding;
  for (std::size_t group : {std::size_t{1}, std::size_t{2}, std::size_t{64}})
    for (double density : {0.01, 0.3, 1.0}) {
      CAPTURE(group);
      CAPTURE(density);
      const topk_int8_res a({.sparsify = {.density = density}, .quantize = {.group = group}});
      for (std::size_t n : model_sizes) check_model<float>(a, n, 2, 6);
      const chunks_topk_int4a b({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = density},
                                 .quantize = {.group = group}});
      for (std::size_t n : model_sizes) check_model<gc::bf16_t>(b, n, 2, 7);
      const chunks_topk_int2_res c({.partition = {.chunk_bytes = 4100},
                                    .sparsify = {.density = density},
                                    .quantize = {.group = group, .round = rounding::stochastic},
                                    .seed = 99});
      for (std::size_t n : model_sizes) check_model<float>(c, n, 3, 8);
    }
}

TEST_CASE("grouped path model: odd code widths (3, 13, 32 bits), groups and ungrouped stochastic") {
  using gc::quantize::rounding;
  for (std::size_t group : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{4096}}) {
    CAPTURE(group);
    const chunks_dense_odd_res<3> a({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group, .round = rounding::stochastic}});
    const chunks_dense_odd_res<13> b({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group}});
    const chunks_topk_odd<32> c({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.2},
                                 .quantize = {.group = group, .round = rounding::stochastic}});
    for (std::size_t n : model_sizes) {
      check_model<float>(a, n, 2, 9);
      check_model<float>(b, n, 2, 10);
      check_model<float>(c, n, 2, 11);
    }
  }
}

TEST_CASE("grouped path model: decode checks and values equal the CPU's") {
  const std::size_t n = 5000;
  const chunks_dense_int4a_res a({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 64}});
  const chunks_topk_int2_res b({.partition = {.chunk_bytes = 4100}, .sparsify = {.density = 0.1}, .quantize = {.group = 2}});
  const dense_int8 c({.quantize = {.group = 1}});
  check_decode_model(a, gctest::cpu_payload<float>(a, n, 1), n);
  check_decode_model(b, gctest::cpu_payload<float>(b, n, 2), n);
  check_decode_model(c, gctest::cpu_payload<float>(c, n, 3), n);
  check_decode_model(c, gctest::cpu_payload<float>(c, 40000, 3), 40000);  // metadata over several tiles

  // Tampered metadata: the first failing group (over all tiles and threads) decides.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto tamper = [&](const auto& comp, std::size_t size, std::vector<std::pair<std::size_t, float>> at) {
    auto p = gctest::cpu_payload<float>(comp, size, 4);
    for (auto [offset, v] : at) put<float>(p, offset, v);
    reseal_all(p);
    check_decode_model(comp, p, size);
    check_decode_model(comp, p, size, 5);
  };
  const std::size_t meta = gc::frame::header_bytes;
  tamper(c, 40000, {{meta + 4 * 39999, -1.0f}});                       // the last group, in the second tile
  tamper(c, 40000, {{meta + 4 * 30000, nan}, {meta + 4 * 9000, -2.0f}});  // the earlier group decides
  tamper(c, 40000, {{meta + 4 * 9000, inf}, {meta + 4 * 30000, -2.0f}});
  tamper(a, n, {{meta + 8 * 3 + 4, nan}});                             // asymmetric: lo
  tamper(a, n, {{meta + 8 * 5, -0.0f}});
  tamper(a, n, {{meta + 8 * 2, 3e38f}});                               // lo + 15 s overflows
  tamper(b, n, {{meta + 4 * 7, -1.0f}});

  // Strict receivers: a value decoding to infinity (odd_bits lets huge steps through).
  const chunks_dense_odd_res<13> odd({.partition = {.chunk_bytes = 4100}, .quantize = {.group = 8}, .allow_non_finite = false});
  auto p = gctest::cpu_payload<float>(odd, n, 5);
  put<float>(p, meta + 8 * 20 + 4, 3e38f);  // group 20's step: its top codes overflow
  reseal_all(p);
  check_decode_model(odd, p, n);
  check_decode_model(odd, p, n, 7);
}

}  // TEST_SUITE("host")
