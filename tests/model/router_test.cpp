// router<Slots...>: routing by role and size, payloads equal to each slot's own frames, the
// receiver dispatching on codec ids, several ranks, per-chunk use, bad input, checkpoints.
#include <doctest/doctest.h>

#include <gradcomp/partition/whole.hpp>
#include <gradcomp/quantize/fp16.hpp>
#include <gradcomp/model/published.hpp>
#include <gradcomp/model/router.hpp>
#include <gradcomp/model/tagc.hpp>

#include <cmath>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

#include "support/frames.hpp"
#include "support/random.hpp"

namespace gc = gradcomp;
namespace gm = gradcomp::model;
using gc::role;

namespace {

using R = gm::tagc_router<>;

// GPT-2 shaped but small: 2 layers, d_model 64, vocab 512, context 64; a gap of 16 elements
// after every tensor, so that a router must leave what lies between tensors alone.
gc::layout small_gpt2() {
  const gc::layout packed = gm::gpt2_layout({2, 64, 512, 64, true});
  gc::layout l;
  for (const gc::tensor_desc& t : packed.tensors()) l.add_at(l.extent() + (l.size() ? 16 : 0), t.name, t.shape);
  return l;
}

std::tuple<gm::sketch_stand_in, gm::bf16_cast, gm::fp32_plain> slots(bool allow_non_finite = true) {
  gm::sketch_stand_in::config sk;
  sk.partition.chunk_bytes = 16 << 10;  // 4096 floats: the big tensors span several frames
  sk.sparsify.density = 0.05;
  sk.compact_indices = false;           // u32 index lists: the forged-index test knows where
  sk.allow_non_finite = allow_non_finite;
  gm::bf16_cast::config b;
  b.partition.chunk_bytes = 16 << 10;
  return {gm::sketch_stand_in(sk), gm::bf16_cast(b), gm::fp32_plain()};
}

R make_router(bool compress_attention = false) {
  return R(small_gpt2(), gm::tagc_routing(compress_attention, 1000), slots());
}

std::vector<float> gradient(const gc::layout& l, std::uint32_t seed) {
  auto g = gc::test::heavy_tailed(l.extent() + 8, seed);
  return g;
}

std::vector<std::byte> compress(const R& r, std::span<const float> g, gm::router_state& st) {
  std::vector<std::byte> p(r.max_payload_bytes<float>());
  const auto w = r.compress<float>(g, st, p);
  REQUIRE(w.ok());
  p.resize(*w);
  return p;
}

// Tensor t's frames as its slot alone writes them, for the region of g (and a state of its own).
template <class C>
std::vector<std::byte> own_frames(const C& c, std::span<const float> region, gc::state& st) {
  std::vector<std::byte> p(c.template max_payload_bytes<float>(region.size()));
  const auto w = c.template compress<float>(region, st, p);
  REQUIRE(w.ok());
  p.resize(*w);
  return p;
}

}  // namespace

TEST_CASE("router: each tensor goes to the slot of its role, small tensors uncompressed") {
  const R r = make_router();
  REQUIRE(r.validate().ok());
  const gc::layout& l = r.get_layout();
  for (std::size_t t = 0; t < l.size(); ++t) {
    CAPTURE(l[t].name);
    const role x = r.role_of(t);
    std::size_t want = gm::tagc_bf16_slot;
    if (l[t].elements() < 1000) {
      want = gm::tagc_plain_slot;
    } else if (x == role::mlp_in || x == role::mlp_out || x == role::embedding || x == role::lm_head) {
      want = gm::tagc_sketch_slot;
    }
    CHECK(r.route(t) == want);
  }
  CHECK(r.route(0) == gm::tagc_sketch_slot);                                    // wte (tied head)
  CHECK(r.route(l.find("transformer.h.0.attn.c_attn.weight")) == gm::tagc_bf16_slot);
  CHECK(r.route(l.find("transformer.h.0.ln_1.weight")) == gm::tagc_plain_slot);
  const R a = make_router(true);
  CHECK(a.route(l.find("transformer.h.0.attn.c_attn.weight")) == gm::tagc_sketch_slot);
  CHECK(a.route(l.find("transformer.h.1.attn.c_proj.weight")) == gm::tagc_sketch_slot);
  CHECK(r.slot_of_codec(r.codec_of(1)) == 1);
  CHECK(r.slot_of_codec(0x12345678u) == R::npos);
}

TEST_CASE("router: a payload is each tensor's own frames, in layout order, decoding per region") {
  const R r = make_router();
  const gc::layout& l = r.get_layout();
  auto st = r.make_state();
  const auto g = gradient(l, 1);
  const auto payload = compress(r, g, st);

  // The same tensors through their slots alone, each with its own state.
  std::vector<std::byte> expect;
  for (std::size_t t = 0; t < l.size(); ++t) {
    const std::span<const float> region(g.data() + l[t].offset, l[t].elements());
    const auto alone = [&](const auto& c) {
      gc::state own = c.make_state(region.size());
      return own_frames(c, region, own);
    };
    const std::size_t s = r.route(t);
    const auto frames = s == 0 ? alone(r.slot<0>()) : s == 1 ? alone(r.slot<1>()) : alone(r.slot<2>());
    expect.insert(expect.end(), frames.begin(), frames.end());
  }
  CHECK(payload == expect);
  CHECK(payload.size() < 4 * l.parameters() / 2);  // smaller than bf16 everywhere

  std::vector<float> out(g.size(), 7.0f);
  REQUIRE(r.decompress<float>(payload, out).ok());
  std::size_t inside = 0;
  for (std::size_t t = 0; t < l.size(); ++t) {
    const std::size_t at = l[t].offset, n = l[t].elements();
    inside += n;
    double e2 = 0, g2 = 0;
    for (std::size_t j = at; j < at + n; ++j) e2 += std::pow(out[j] - g[j], 2), g2 += std::pow(g[j], 2);
    CAPTURE(l[t].name);
    if (r.route(t) == gm::tagc_plain_slot) CHECK(e2 == 0);                         // fp32: exact
    if (r.route(t) == gm::tagc_bf16_slot) CHECK(std::sqrt(e2 / g2) < 1.0 / 256);  // bf16
    // top-k 5% (contraction, chunk by chunk) plus bf16 rounding of what is kept
    if (r.route(t) == gm::tagc_sketch_slot) CHECK(e2 <= (0.95 + 0x1p-16) * g2);
  }
  std::size_t untouched = 0;
  for (float v : out) untouched += v == 7.0f;
  CHECK(untouched == out.size() - inside);  // the gaps and the tail
}

TEST_CASE("router: compress_chunk over the global plan writes compress's bytes") {
  const R r = make_router();
  auto whole = r.make_state(), piecewise = r.make_state();
  for (std::uint32_t step = 0; step < 2; ++step) {
    const auto g = gradient(r.get_layout(), 10 + step);
    const auto payload = compress(r, g, whole);
    std::vector<std::byte> joined;
    const std::size_t chunks = r.chunk_count<float>();
    CHECK(chunks > r.get_layout().size());  // some tensors span several frames
    for (std::size_t i = 0; i < chunks; ++i) {
      std::vector<std::byte> frame(r.max_frame_bytes<float>(i));
      const auto w = r.compress_chunk<float>(i, g, piecewise, frame);
      REQUIRE(w.ok());
      joined.insert(joined.end(), frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(*w));
    }
    r.finish_step(piecewise);
    CHECK(joined == payload);
    std::vector<std::byte> frame(64);
    CHECK(r.compress_chunk<float>(chunks, g, piecewise, frame).code() == gc::errc::invalid_argument);
    CHECK(r.locate<float>(chunks).tensor == R::npos);
    CHECK(r.max_frame_bytes<float>(chunks) == 0);
  }
  CHECK(whole.tensors[0].step == 2);
  CHECK(piecewise.tensors[0].step == 2);
}

TEST_CASE("router: the payloads of several ranks, back to back, accumulate into their sum") {
  const R r = make_router();
  const gc::layout& l = r.get_layout();
  std::vector<std::byte> gathered;
  std::vector<std::vector<float>> decoded;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    auto st = r.make_state();
    const auto p = compress(r, gradient(l, 20 + rank), st);
    gathered.insert(gathered.end(), p.begin(), p.end());
    decoded.emplace_back(l.extent() + 8, 0.0f);
    REQUIRE(r.decompress<float>(p, decoded.back()).ok());
  }
  std::vector<float> sum(l.extent() + 8, 0.0f);
  REQUIRE(r.accumulate<float>(gathered, sum).ok());
  for (std::size_t j = 0; j < sum.size(); ++j) {
    const float expect = ((0.0f + decoded[0][j]) + decoded[1][j]) + decoded[2][j];
    if (sum[j] != expect) FAIL_CHECK("element " << j << ": " << sum[j] << " != " << expect);
  }
}

TEST_CASE("router: the receiver decodes by codec id, whatever routing the sender chose") {
  const R sender = make_router(true), receiver = make_router(false);  // attention sketched or not
  auto st = sender.make_state();
  const auto g = gradient(sender.get_layout(), 30);
  const auto payload = compress(sender, g, st);
  std::vector<float> a(g.size(), 0.0f), b(g.size(), 0.0f);
  REQUIRE(sender.decompress<float>(payload, a).ok());
  REQUIRE(receiver.decompress<float>(payload, b).ok());
  CHECK(a == b);
}

TEST_CASE("router: single frames decode by tensor (pipelined steps)") {
  const R r = make_router();
  auto st = r.make_state();
  const auto g = gradient(r.get_layout(), 40);
  std::vector<float> whole(g.size(), 0.0f), by_frame(g.size(), 0.0f);
  {
    auto copy = r.make_state();
    REQUIRE(r.decompress<float>(compress(r, g, copy), whole).ok());
  }
  for (std::size_t i = 0; i < r.chunk_count<float>(); ++i) {
    std::vector<std::byte> frame(r.max_frame_bytes<float>(i));
    const auto w = r.compress_chunk<float>(i, g, st, frame);
    REQUIRE(w.ok());
    frame.resize(*w);
    const auto at = r.locate<float>(i);
    REQUIRE(r.decompress_tensor<float>(at.tensor, frame, by_frame).ok());
    // A frame names its chunk, not its tensor: a tensor whose plan lacks the chunk refuses it
    // (wte's second chunk, offered to wpe, one chunk long).
    if (at.tensor == 0 && at.chunk == 1) {
      const auto before = by_frame;
      CHECK(r.decompress_tensor<float>(1, frame, by_frame).code() == gc::errc::size_mismatch);
      CHECK(by_frame == before);
    }
  }
  CHECK(whole == by_frame);
  std::vector<float> twice(g.size(), 0.0f);
  // Two frames of tensor 0 (its chunks 0 and 1) accumulate in one call.
  std::vector<std::byte> frames;
  auto st2 = r.make_state();
  for (std::size_t i = 0; i < 2; ++i) {
    std::vector<std::byte> frame(r.max_frame_bytes<float>(i));
    frame.resize(*r.compress_chunk<float>(i, g, st2, frame));
    frames.insert(frames.end(), frame.begin(), frame.end());
  }
  REQUIRE(r.accumulate_tensor<float>(0, frames, twice).ok());
  for (std::size_t j = 0; j < 2 * 4096; ++j) CHECK(twice[j] == whole[j]);
  CHECK(r.accumulate_tensor<float>(r.get_layout().size(), frames, twice).code() == gc::errc::invalid_argument);
}

TEST_CASE("router: bad payloads are refused and leave the output untouched") {
  const R r = make_router();
  const gc::layout& l = r.get_layout();
  auto st = r.make_state();
  const auto g = gradient(l, 50);
  auto payload = compress(r, g, st);
  const std::vector<float> before(g.size(), 3.0f);
  auto out = before;
  const auto refused = [&](std::span<const std::byte> p) {
    out = before;
    const gc::status s = r.accumulate<float>(p, out);
    CHECK(out == before);
    return s.code();
  };
  auto frames = gc::test::split_frames(payload);
  const std::size_t last = frames.size() - 1;

  SUBCASE("a flipped byte in the last frame") {
    auto bad = payload;
    bad[bad.size() - 9] ^= std::byte{1};
    CHECK(refused(bad) == gc::errc::checksum_mismatch);
  }
  SUBCASE("an index out of range in the last sketched frame, CRC made right") {
    auto bad = payload;
    auto bad_frames = gc::test::split_frames(bad);
    std::size_t k = bad_frames.size();
    while (k-- > 0)
      if (r.slot_of_codec(gc::test::header_of(bad_frames[k]).codec_id) == gm::tagc_sketch_slot) break;
    const auto h = gc::test::header_of(bad_frames[k]);
    gc::test::poke<std::uint32_t>(bad_frames[k], h.index_offset() + 4 * (h.kept_count - 1), 0xfffffff0u);
    gc::test::reseal(bad_frames[k]);
    CHECK(refused(bad) == gc::errc::index_out_of_range);
  }
  SUBCASE("a frame of a codec the router lacks") {
    gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::fp16, gc::feedback::none> other;
    auto os = other.make_state(l[l.size() - 1].elements());
    auto bad = payload;
    const auto extra = own_frames(other, std::span<const float>(g.data(), l[l.size() - 1].elements()), os);
    bad.resize(bad.size() - frames[last].size());
    bad.insert(bad.end(), extra.begin(), extra.end());
    CHECK(refused(bad) == gc::errc::codec_mismatch);
  }
  SUBCASE("truncated, or ending inside a router payload") {
    CHECK(refused(std::span<const std::byte>(payload).first(payload.size() - 8)) == gc::errc::truncated);
    CHECK(refused(std::span<const std::byte>(payload).first(payload.size() - frames[last].size())) == gc::errc::truncated);
    CHECK(refused({}) == gc::errc::truncated);
  }
  SUBCASE("frames out of order") {
    std::vector<std::byte> swapped;
    for (std::size_t i : {std::size_t{1}, std::size_t{0}})
      swapped.insert(swapped.end(), frames[i].begin(), frames[i].end());
    for (std::size_t i = 2; i < frames.size(); ++i) swapped.insert(swapped.end(), frames[i].begin(), frames[i].end());
    CHECK(refused(swapped) == gc::errc::size_mismatch);
  }
  SUBCASE("an output smaller than the layout") {
    std::vector<float> small(l.extent() - 1, 3.0f);
    CHECK(r.accumulate<float>(payload, small).code() == gc::errc::size_mismatch);
  }
}

TEST_CASE("router: bad compress arguments change neither payload nor state") {
  R r = make_router();
  const gc::layout& l = r.get_layout();
  auto st = r.make_state();
  auto g = gradient(l, 60);
  std::vector<std::byte> payload(r.max_payload_bytes<float>(), std::byte{0x5a});
  const auto unchanged = [&] {
    for (const auto& s : st.tensors) CHECK(s.step == 0);
    for (std::byte b : payload) REQUIRE(b == std::byte{0x5a});
  };
  SUBCASE("a state of another routing") {
    r.set_routing(gm::tagc_routing(true, 1000));
    CHECK(r.compress<float>(g, st, payload).code() == gc::errc::size_mismatch);
  }
  SUBCASE("a payload too small, a buffer too small") {
    CHECK(r.compress<float>(g, st, std::span<std::byte>(payload).first(payload.size() - 1)).code() ==
          gc::errc::buffer_too_small);
    CHECK(r.compress<float>(std::span<const float>(g).first(l.extent() - 1), st, payload).code() ==
          gc::errc::size_mismatch);
  }
  SUBCASE("an element type the layout does not have") {
    std::vector<gc::bf16_t> h(g.size(), gc::bf16_t{0});
    CHECK(r.compress<gc::bf16_t>(h, st, payload).code() == gc::errc::invalid_argument);
  }
  SUBCASE("NaN in the last tensor where its slot forbids it") {
    R strict(small_gpt2(), gm::tagc_routing(false, 1000), slots(false));
    st = strict.make_state();
    g[l[l.find("transformer.h.1.mlp.c_proj.weight")].offset + 5] = NAN;
    CHECK(strict.compress<float>(g, st, payload).code() == gc::errc::non_finite_value);
  }
  unchanged();
}

TEST_CASE("router: validate() refuses shared codec ids and slots beyond the set") {
  gm::router<gm::bf16_cast, gm::bf16_cast> twins(small_gpt2());
  CHECK(twins.validate() == gc::errc::invalid_argument);
  auto st = twins.make_state();
  std::vector<float> g(twins.get_layout().extent());
  std::vector<std::byte> p(twins.max_payload_bytes<float>());
  CHECK(twins.compress<float>(g, st, p).code() == gc::errc::invalid_argument);
  gm::routing beyond = gm::tagc_routing();
  beyond.small_slot = 3;
  CHECK(R(small_gpt2(), beyond, slots()).validate() == gc::errc::invalid_argument);
  gc::layout overlapping;
  overlapping.add("a.weight", {4, 4}).add_at(3, "b.weight", {4, 4});
  CHECK(R(overlapping, gm::tagc_routing(), slots()).validate() == gc::errc::invalid_argument);
}

TEST_CASE("router: a checkpoint restores every tensor's residual and step") {
  const R r = make_router();
  const gc::layout& l = r.get_layout();
  auto st = r.make_state();
  (void)compress(r, gradient(l, 70), st);
  std::vector<std::byte> image(r.checkpoint_bytes(st));
  REQUIRE(r.save_checkpoint(st, image).ok());
  const auto next = gradient(l, 71);
  const auto expect = compress(r, next, st);  // the step after the checkpoint

  auto restored = r.make_state();
  REQUIRE(r.load_checkpoint(image, restored).ok());
  CHECK(compress(r, next, restored) == expect);

  auto fresh = r.make_state();
  auto bad = image;
  bad[bad.size() - 1] ^= std::byte{1};
  CHECK(r.load_checkpoint(bad, fresh).code() == gc::errc::checksum_mismatch);
  for (const auto& s : fresh.tensors) CHECK(s.step == 0);  // all or nothing
  CHECK(r.load_checkpoint(std::span<const std::byte>(image).first(image.size() - 4), fresh).code() ==
        gc::errc::size_mismatch);
  const R other = make_router(true);  // attention in the sketch slot: other codecs, other states
  auto theirs = other.make_state();
  CHECK(other.load_checkpoint(image, theirs).code() != gc::errc::ok);
}
