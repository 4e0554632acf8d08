// The transform as the fifth policy of a composition: the identity keeps every composition's
// type and bytes; a transformed composition equals "transform, the same composition without
// it, inverse" bit for bit (dense and sparse, fp32 and bf16, decompress and accumulate); error
// feedback conserves what was not sent, in the transformed domain; a frame made with another
// transform or seed is refused; golden bytes of the header's transform fields.
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/cpu/transform.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "support/codec.hpp"
#include "support/frames.hpp"
#include "support/random.hpp"

using namespace gradcomp;
namespace tf = gradcomp::transform;

namespace {

template <class S, class Q, class F, class X = tf::identity>
using chunked = compressor<partition::chunks, S, Q, F, X>;

std::vector<float> decoded(const auto& comp, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<float> out(n, 0.0f);
  const status s = comp.template decompress<float>(p, std::span(out));
  REQUIRE_MESSAGE(s.ok(), s.detail());
  return out;
}

// y = the transform of every chunk of x, under comp's chunk plan for element type T.
template <class T, class C>
std::vector<float> transformed(const C& comp, const std::vector<float>& x, bool forward) {
  std::vector<float> y = x;
  for (std::size_t i = 0, c = comp.template chunk_count<T>(x.size()); i < c; ++i) {
    const chunk_range r = comp.template chunk<T>(x.size(), i);
    const auto& tc = comp.get_config().transform;
    using X = typename C::transform;
    gradcomp::cpu::detail::transform_chunk<X>(tc, static_cast<std::uint32_t>(i), y.data() + r.offset, r.count, !forward);
  }
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (float_bits(a[i]) != float_bits(b[i])) return false;
  return true;
}

// The transformed composition against its plain twin applied to the transformed gradient:
// the same values and codes (the frames differ in the header's transform fields only), and a
// decode that is the plain decode inverted.
template <class Transformed, class Plain>
void check_against_plain(const typename Transformed::config& tc, std::size_t n, int steps) {
  typename Plain::config pc{};
  pc.partition = tc.partition, pc.sparsify = tc.sparsify, pc.quantize = tc.quantize, pc.feedback = tc.feedback;
  pc.seed = tc.seed;
  const Transformed with(tc);
  const Plain plain(pc);
  state st = with.make_state(n), pst = plain.make_state(n);
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const std::vector<float> g = test::heavy_tailed(n, static_cast<std::uint32_t>(17 + step), 1.0f);
    const auto p = test::compress_all(with, g, st);
    const auto q = test::compress_all(plain, transformed<float>(with, g, true), pst);
    REQUIRE(p.size() == q.size());
    for (std::size_t at = 0; at < p.size();) {  // frame by frame: the headers' transform fields differ
      const auto h = frame::parse(std::span(p).subspan(at));
      REQUIRE(h);
      CHECK(h->transform == Transformed::transform::word(tc.transform));
      CHECK(h->transform_seed == Transformed::transform::seed(tc.transform));
      CHECK(std::equal(p.begin() + static_cast<std::ptrdiff_t>(at + frame::header_bytes),
                       p.begin() + static_cast<std::ptrdiff_t>(at + h->frame_bytes()),
                       q.begin() + static_cast<std::ptrdiff_t>(at + frame::header_bytes)));
      at += h->frame_bytes();
    }
    CHECK(same_bits(decoded(with, p, n), transformed<float>(with, decoded(plain, q, n), false)));
    CHECK(same_bits(st.residual, pst.residual));  // feedback lives in the transformed domain
  }
}

}  // namespace

TEST_CASE("transform: the identity default keeps a composition's type") {
  using plain = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
  static_assert(std::is_same_v<plain, compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual, tf::identity>>);
  static_assert(!plain::transformed);
  static_assert(chunked<sparsify::dense, quantize::int_block<4>, feedback::none, tf::hadamard>::transformed);
  const plain comp;
  state st = comp.make_state(1000);
  const auto p = test::compress_all(comp, test::heavy_tailed(1000, 1, 1.0f), st);
  const auto h = test::header_of(p);
  CHECK(h.transform == 0);
  CHECK(h.transform_seed == 0);
  CHECK(load_le<std::uint32_t>(p.data() + 20) == 0);
  CHECK(load_le<std::uint32_t>(p.data() + 80) == 0);
}

TEST_CASE("transform: a transformed composition is transform, the plain composition, inverse") {
  SUBCASE("int4 with a rotation, dense, no feedback") {
    using with = chunked<sparsify::dense, quantize::int_block<4>, feedback::none, tf::hadamard>;
    using plain = chunked<sparsify::dense, quantize::int_block<4>, feedback::none>;
    for (std::size_t n : {1, 5, 256, 1000, 70000})
      check_against_plain<with, plain>({.partition = {.chunk_bytes = 16384}, .quantize = {.group = 64}, .transform = {.block = 64, .seed = 9}}, n, 1);
  }
  SUBCASE("int2 with a rotation and residual feedback, stochastic rounding") {
    using with = chunked<sparsify::dense, quantize::int_block<2>, feedback::residual, tf::hadamard>;
    using plain = chunked<sparsify::dense, quantize::int_block<2>, feedback::residual>;
    check_against_plain<with, plain>(
        {.quantize = {.group = 128, .round = quantize::rounding::stochastic}, .transform = {.block = 256, .seed = 4}, .seed = 3}, 5000, 3);
  }
  SUBCASE("DCT top-k per row with feedback") {
    using with = chunked<sparsify::row_topk, quantize::bf16, feedback::residual, tf::dct>;
    using plain = chunked<sparsify::row_topk, quantize::bf16, feedback::residual>;
    check_against_plain<with, plain>({.sparsify = {.cols = 256, .k_per_row = 8}, .transform = {.block = 64}}, 256 * 40, 3);
  }
  SUBCASE("DCT with exact top-k") {
    using with = chunked<sparsify::topk, quantize::none, feedback::residual, tf::dct>;
    using plain = chunked<sparsify::topk, quantize::none, feedback::residual>;
    check_against_plain<with, plain>({.sparsify = {.density = 0.05}, .transform = {.block = 32}}, 3000, 2);
  }
}

TEST_CASE("transform: bf16 gradients, accumulate, and the round trip of a lossless code") {
  using lossless = chunked<sparsify::dense, quantize::none, feedback::none, tf::hadamard>;
  const lossless comp({.partition = {.chunk_bytes = 4096}, .transform = {.block = 128, .seed = 5}});
  const std::size_t n = 3000;
  const std::vector<float> x = test::heavy_tailed(n, 2, 1.0f);
  state st = comp.make_state(n);
  const auto p = test::compress_all(comp, x, st);
  const std::vector<float> back = decoded(comp, p, n);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(back[i]) - x[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(x[i])));
  }
  CHECK(worst < 1e-6 * scale);  // the inverse returns the input to fp32 rounding of the block's sums
  // accumulate adds the inverted values
  std::vector<float> sum(n, 1.0f);
  REQUIRE(comp.accumulate<float>(p, std::span(sum)));
  for (std::size_t i = 0; i < n; ++i) CHECK(float_bits(sum[i]) == float_bits(canonical_nan(1.0f + back[i])));
  // bf16 gradients: their chunk plan (2-byte elements), transformed as fp32
  std::vector<bf16_t> xb(n);
  std::vector<float> xf(n);
  for (std::size_t i = 0; i < n; ++i) xb[i] = from_float<bf16_t>(x[i]), xf[i] = to_float(xb[i]);
  state sb = comp.make_state(n);
  const auto pb = test::compress_all(comp, xb, sb);
  CHECK(comp.chunk_count<bf16_t>(n) != comp.chunk_count<float>(n));
  std::vector<bf16_t> outb(n);
  REQUIRE(comp.decompress<bf16_t>(pb, std::span(outb)));
  const std::vector<float> ref = transformed<bf16_t>(comp, transformed<bf16_t>(comp, xf, true), false);
  for (std::size_t i = 0; i < n; ++i) CHECK(outb[i].bits == from_float<bf16_t>(ref[i]).bits);
}

TEST_CASE("transform: error feedback conserves the unsent part in the transformed domain") {
  // sum of decoded + inverse(residual) == sum of gradients, to fp32 rounding of the sums.
  using C = chunked<sparsify::topk, quantize::bf16, feedback::residual, tf::hadamard>;
  const C comp({.sparsify = {.density = 0.02}, .transform = {.block = 64, .seed = 2}});
  const std::size_t n = 4096;
  state st = comp.make_state(n);
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> g = test::heavy_tailed(n, static_cast<std::uint32_t>(40 + step), 1.0f);
    for (std::size_t i = 0; i < n; ++i) given[i] += g[i];
    const std::vector<float> d = decoded(comp, test::compress_all(comp, g, st), n);
    for (std::size_t i = 0; i < n; ++i) sent[i] += d[i];
  }
  std::vector<float> owed = st.residual;
  gradcomp::cpu::detail::transform_chunk<tf::hadamard>(comp.get_config().transform, 0, owed.data(), n, true);
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(sent[i] + owed[i] - given[i]));
    scale = std::max(scale, std::fabs(given[i]));
  }
  CHECK(err < 1e-4 * scale);
}

TEST_CASE("transform: frames of another transform are refused, outputs untouched") {
  using rotated = chunked<sparsify::dense, quantize::int_block<4>, feedback::none, tf::hadamard>;
  using plain = chunked<sparsify::dense, quantize::int_block<4>, feedback::none>;
  using cosine = chunked<sparsify::dense, quantize::int_block<4>, feedback::none, tf::dct>;
  const std::size_t n = 512;
  const rotated a({.transform = {.block = 64, .seed = 1}});
  state st = a.make_state(n);
  const auto p = test::compress_all(a, test::heavy_tailed(n, 3, 1.0f), st);
  const auto refused = [&](const auto& receiver) {
    std::vector<float> out(n, 7.0f);
    const status s = receiver.template decompress<float>(p, std::span(out));
    CHECK(s.code() == errc::codec_mismatch);
    for (float v : out) CHECK(v == 7.0f);
  };
  refused(rotated({.transform = {.block = 64, .seed = 2}}));
  refused(rotated({.transform = {.block = 128, .seed = 1}}));
  refused(plain());
  refused(cosine({.transform = {.block = 64}}));
  // and the other way: a plain frame to a rotating receiver
  const plain b;
  state sb = b.make_state(n);
  const auto q = test::compress_all(b, test::heavy_tailed(n, 3, 1.0f), sb);
  std::vector<float> out(n, 7.0f);
  CHECK(a.decompress<float>(q, std::span(out)).code() == errc::codec_mismatch);
  // a bad block is a clear error, nothing written
  const rotated bad({.transform = {.block = 48}});
  CHECK(bad.validate().code() == errc::invalid_argument);
  std::vector<std::byte> room(a.max_payload_bytes<float>(n), std::byte{0x5a});
  state sbad = a.make_state(n);
  const std::vector<float> g(n, 1.0f);
  CHECK(bad.compress<float>(g, sbad, room).error().code() == errc::invalid_argument);
  for (std::byte v : room) CHECK(v == std::byte{0x5a});
  CHECK(cosine({.transform = {.block = 8192}}).validate().code() == errc::invalid_argument);
  // the header's transform fields: the top half of the word and a seed without a transform
  // are malformed headers
  auto bad_word = p;
  store_le<std::uint32_t>(bad_word.data() + 20, 0x00010101u);
  frame::seal(std::span(bad_word).first(frame::parse(p)->frame_bytes()));
  CHECK(frame::parse(bad_word).error().code() == errc::bad_header);
  auto stray_seed = q;
  store_le<std::uint32_t>(stray_seed.data() + 80, 3);
  frame::seal(std::span(stray_seed).first(frame::parse(q)->frame_bytes()));
  CHECK(frame::parse(stray_seed).error().code() == errc::bad_header);
}

TEST_CASE("transform: golden bytes of the header's transform fields") {
  // int4, groups of 8, the Hadamard transform of blocks of 8 with seed 0x01020304: word
  // 0x0301 (id 1, log2 8 = 3) at byte 20, the seed at byte 80.
  using C = chunked<sparsify::dense, quantize::int_block<4>, feedback::none, tf::hadamard>;
  const C comp({.quantize = {.group = 8}, .transform = {.block = 8, .seed = 0x01020304u}});
  state st = comp.make_state(8);
  const auto p = test::compress_all(comp, std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0}, st);
  REQUIRE(p.size() == 88 + 8 + 8);
  CHECK(load_le<std::uint32_t>(p.data() + 8) == comp.codec_id());
  CHECK(load_le<std::uint32_t>(p.data() + 20) == 0x0301u);
  CHECK(load_le<std::uint32_t>(p.data() + 80) == 0x01020304u);
  // A unit impulse rotates to eight values of magnitude 2^-2 (H D e0 scaled by 2^-ceil(3/2)),
  // so every value is the group's extreme, with the sign Philox drew for element 0.
  CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(0.25f / 7.0f));
  for (std::size_t j = 0; j < 8; ++j) {
    const unsigned byte = std::to_integer<unsigned>(p[96 + j / 2]);
    const unsigned code = j % 2 ? byte >> 4 : byte & 15u;
    CHECK(code == (tf::negated(0x01020304u, 0, 0) ? 0u : 14u));  // -7 or +7 (code - 7): the sign of element 0
  }
  // DCT blocks of 64: word 0x0602, no seed.
  using D = chunked<sparsify::dense, quantize::none, feedback::none, tf::dct>;
  const D dct({.transform = {.block = 64}});
  state sd = dct.make_state(4);
  const auto d = test::compress_all(dct, std::vector<float>{1, 1, 1, 1}, sd);
  CHECK(load_le<std::uint32_t>(d.data() + 20) == 0x0602u);
  CHECK(load_le<std::uint32_t>(d.data() + 80) == 0);
  // a constant block of 4 (the tail) has only its DC coefficient: 4 / sqrt(4) = 2
  CHECK(load_le<std::uint32_t>(d.data() + 88) == float_bits(2.0f));
}
