// model::split: parts by role and size (the router's rule), gather and scatter, bad
// input, and TAGC's routing on the summable path: the count sketch over the MLP, embedding
// and LM head, bf16 over the rest, fp32 for small tensors, on W = 4 simulated ranks.
#include <doctest/doctest.h>

#include <gradcomp/core/murmur3.hpp>
#include <gradcomp/summable/values.hpp>
#include <gradcomp/tagc.hpp>
#include <gradcomp/model/published.hpp>
#include <gradcomp/model/split.hpp>
#include <gradcomp/model/tagc.hpp>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "summable/collective.hpp"

namespace gc = gradcomp;
namespace gm = gradcomp::model;
using gc::role;

namespace {

// GPT-2 shaped but small (2 layers, d_model 64, vocab 512, context 64), a gap of 16 elements
// after every tensor that belongs to no part.
gc::layout small_gpt2() {
  const gc::layout packed = gm::gpt2_layout({2, 64, 512, 64, true});
  gc::layout l;
  for (const gc::tensor_desc& t : packed.tensors()) l.add_at(l.extent() + (l.size() ? 16 : 0), t.name, t.shape);
  return l;
}

bool covered(const gc::layout& l, std::size_t j) {
  for (const auto& t : l.tensors())
    if (j >= t.offset && j < t.offset + t.elements()) return true;
  return false;
}

}  // namespace

TEST_CASE("split: each tensor in the part its role and size route it to, in layout order") {
  const gm::routing r = gm::tagc_routing(false, 1024);
  const gm::split sp(small_gpt2(), r);
  REQUIRE(sp.validate().ok());
  REQUIRE(sp.parts() == 3);
  const gc::layout& l = sp.get_layout();
  const std::vector<role> roles = gc::classifier{}.classify(l);
  std::vector<int> seen(l.size(), 0);
  for (std::size_t p = 0; p < sp.parts(); ++p) {
    std::size_t at = 0, last = 0;
    for (const auto& q : sp.pieces(p)) {
      CHECK(q.at == at);
      CHECK(q.flat == l[q.tensor].offset);
      CHECK(q.count == l[q.tensor].elements());
      CHECK((at == 0 || q.tensor > last));
      CHECK(gm::slot_for(r, q.count, roles[q.tensor]) == p);
      ++seen[q.tensor];
      at += q.count;
      last = q.tensor;
    }
    CHECK(sp.size(p) == at);
  }
  for (int s : seen) CHECK(s == 1);
  CHECK(sp.pieces(0).size() > 0);  // MLP and embeddings
  CHECK(sp.pieces(1).size() > 0);  // attention
  CHECK(sp.pieces(2).size() > 0);  // norms and biases under 1024 elements
  CHECK(l[sp.pieces(0)[0].tensor].name == "transformer.wte.weight");
}

TEST_CASE("split: gather then scatter restores every tensor and leaves the gaps alone, bad sizes refused") {
  const gm::split sp(small_gpt2(), gm::tagc_routing(false, 1024));
  const gc::layout& l = sp.get_layout();
  std::vector<float> flat(l.extent());
  for (std::size_t j = 0; j < flat.size(); ++j) flat[j] = static_cast<float>(j) * 0.5f;
  std::vector<float> back(l.extent(), -1.0f);
  for (std::size_t p = 0; p < sp.parts(); ++p) {
    std::vector<float> part(sp.size(p));
    REQUIRE(sp.gather<float>(p, flat, part).ok());
    REQUIRE(sp.scatter<float>(p, part, back).ok());
  }
  for (std::size_t j = 0; j < flat.size(); ++j) CHECK(back[j] == (covered(l, j) ? flat[j] : -1.0f));

  std::vector<float> part(sp.size(1)), before = back;
  CHECK(sp.gather<float>(3, flat, part).code() == gc::errc::invalid_argument);
  CHECK(sp.gather<float>(1, std::span<const float>(flat).first(flat.size() - 1), part).code() == gc::errc::size_mismatch);
  std::vector<float> short_part(sp.size(1) - 1, 7.0f);
  CHECK(sp.gather<float>(1, flat, short_part).code() == gc::errc::size_mismatch);
  CHECK(sp.scatter<float>(1, short_part, back).code() == gc::errc::size_mismatch);
  CHECK(back == before);  // untouched
  CHECK(sp.size(7) == 0);
  CHECK(sp.pieces(7).empty());

  gm::routing far = gm::tagc_routing();
  far.small_slot = 1000;
  CHECK(gm::split(small_gpt2(), far).validate().code() == gc::errc::invalid_argument);
}

TEST_CASE("split: TAGC's routing on the summable path, W = 4: every part all-reduced, feedback exact") {
  const gm::split sp(small_gpt2(), gm::tagc_routing(false, 1024));
  const gc::layout& l = sp.get_layout();
  constexpr std::uint32_t W = 4;
  // Values whose sums every transport adds exactly: multiples of 2^-12 below 4 in fp32 (the
  // sketch and fp32 parts), of 2^-4 below 1/2 in bf16 (4 significant bits: partial sums of
  // four need at most 6 of bf16's 8).
  std::vector<std::vector<float>> flat(W, std::vector<float>(l.extent(), 0.0f));
  std::vector<float> given(l.extent(), 0.0f);
  for (std::size_t p = 0; p < sp.parts(); ++p)
    for (const auto& q : sp.pieces(p))
      for (std::size_t j = q.flat; j < q.flat + q.count; ++j)
        for (std::uint32_t r = 0; r < W; ++r) {
          const std::uint32_t h = gc::murmur3_u32(static_cast<std::uint32_t>(j), 77 + r);
          flat[r][j] = p == 1 ? static_cast<float>(static_cast<int>(h % 16) - 8) * 0x1.0p-4f
                              : static_cast<float>(static_cast<int>(h % 2048) - 1024) * 0x1.0p-12f * (j % 97 == 0 ? 8.0f : 1.0f);
          given[j] += flat[r][j];
        }
  gc::tagc::config cfg;
  cfg.cells = gc::summable::wire_type::f32;
  cfg.select.density = 0.05;
  const gc::tagc::codec sketch(cfg);
  const gc::summable::cast<gc::quantize::bf16> half;
  const gc::summable::cast<gc::quantize::none> plain;
  std::vector<float> delivered(l.extent(), 0.0f), owed(l.extent(), 0.0f);

  const auto run_part = [&](std::size_t p, const auto& codec) {
    std::vector<std::vector<float>> g(W, std::vector<float>(sp.size(p)));
    for (std::uint32_t r = 0; r < W; ++r) REQUIRE(sp.gather<float>(p, flat[r], g[r]).ok());
    std::vector<typename std::remove_cvref_t<decltype(codec)>::state_type> st(W);
    for (std::uint32_t r = 0; r < W; ++r) {
      if constexpr (requires { codec.make_state(0, 1, 0, st[r]); }) {
        REQUIRE(codec.make_state(sp.size(p), W, r, st[r]).ok());
      } else {
        st[r] = codec.make_state(sp.size(p), W, r);
      }
    }
    std::vector<std::vector<float>> outs;
    REQUIRE(gc::test::run_ranks(codec, st, g, gc::test::collective::all_reduce, outs).ok());
    for (std::uint32_t r = 1; r < W; ++r) CHECK(outs[r] == outs[0]);
    REQUIRE(sp.scatter<float>(p, outs[0], delivered).ok());
    std::vector<float> e(sp.size(p), 0.0f);
    for (std::uint32_t r = 0; r < W; ++r)
      for (std::size_t i = 0; i < e.size(); ++i) e[i] += st[r].residual.empty() ? 0.0f : st[r].residual[i];
    REQUIRE(sp.scatter<float>(p, e, owed).ok());
    return st;
  };
  const auto tagc_states = run_part(0, sketch);
  run_part(1, half);
  run_part(2, plain);

  const auto& stats = tagc_states[0].stats;  // all-reduced: every rank peels every shard
  CHECK(stats.items > 0);
  CHECK(stats.peeled > 0.9 * static_cast<double>(stats.items));
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < l.extent(); ++j) wrong += delivered[j] + owed[j] != given[j];
  CHECK(wrong == 0);  // what was delivered plus what the ranks still owe is every gradient
}
