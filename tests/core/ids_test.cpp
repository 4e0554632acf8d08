// core/ids.hpp: the ids the policies carry (wire values, pinned here independently of the
// header), their uniqueness, the user range and the record tags.
#include <gradcomp/core/ids.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstdint>

#include "support/log2_quantizer.hpp"

namespace gradcomp {
namespace {

// The quantizer ids as the policies carry them (every instantiation of a template shares one).
constexpr std::uint8_t quantizer_ids[] = {
    quantize::none::id,        quantize::bf16::id,         quantize::fp16::id,    quantize::fp8_e4m3::id,
    quantize::fp8_e5m2::id,    quantize::int_block<4>::id, quantize::qsgd<4>::id, quantize::terngrad::id,
    quantize::sign::id,        quantize::piecewise<4>::id, quantize::natural::id,
};
constexpr std::uint8_t sparsifier_ids[] = {
    sparsify::dense::id, sparsify::topk::id, sparsify::threshold::id, sparsify::randomk::id, sparsify::row_topk::id,
};

static_assert(ids::distinct(quantizer_ids), "two library quantizers carry one id");
static_assert(ids::distinct(sparsifier_ids), "two library sparsifiers carry one id");

TEST_CASE("ids: every policy keeps its wire value") {
  const std::uint8_t q[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  for (std::size_t i = 0; i < std::size(q); ++i) CHECK(quantizer_ids[i] == q[i]);
  const std::uint8_t s[] = {1, 2, 3, 4, 5};
  for (std::size_t i = 0; i < std::size(s); ++i) CHECK(sparsifier_ids[i] == s[i]);
  CHECK(quantize::int_block<8, quantize::int_range::asymmetric>::id == 6);
  CHECK(quantize::qsgd<8>::id == 7);
  CHECK(quantize::piecewise<3>::id == 10);
}

TEST_CASE("ids: the uniqueness check sees a duplicate") {
  constexpr std::uint8_t dup[] = {1, 2, 3, 2};
  constexpr std::uint8_t ok[] = {1, 2, 3, 4};
  static_assert(!ids::distinct(dup));
  static_assert(ids::distinct(ok));
  constexpr std::uint8_t with_user[] = {1, 200};
  constexpr std::uint8_t with_zero[] = {0, 1};
  static_assert(!ids::library_range(with_user) && !ids::library_range(with_zero));
}

TEST_CASE("ids: library policies and the user range") {
  static_assert(ids::library_policy<quantize::bf16> && ids::library_policy<quantize::int_block<2>> &&
                ids::library_policy<quantize::fp8_e5m2> && ids::library_policy<sparsify::row_topk>);
  static_assert(!ids::library_policy<test::log2_levels>);
  static_assert(ids::id_allowed<test::log2_levels> && ids::id_allowed<quantize::sign>);
  static_assert(ids::user_id(ids::first_user) && ids::user_id(255));
  static_assert(!ids::user_id(127) && !ids::user_id(0) && !ids::user_id(256));
  CHECK(ids::first_user == 128);
}

TEST_CASE("ids: record tags are their ASCII bytes") {
  CHECK(ids::tag::frame == 0x52464347u);
  CHECK(ids::tag::checkpoint == 0x54534347u);
  CHECK(ids::tag::tagc_checkpoint == 0x43544347u);
  CHECK(ids::tag::tagc_codec == 0x43474154u);
  CHECK(ids::tag::shard_slot == 0x4c534347u);
  CHECK(ids::tag::sharded_checkpoint == 0x48534347u);
  CHECK(frame::magic == ids::tag::frame);
  CHECK(checkpoint::kind.magic == ids::tag::checkpoint);
  CHECK(tagc::checkpoint::kind.magic == ids::tag::tagc_checkpoint);
}

}  // namespace
}  // namespace gradcomp
