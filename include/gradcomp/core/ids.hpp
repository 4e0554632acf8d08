#pragma once
// Every id gradcomp writes to identify a format, in one place. A frame's codec id is
// (sparsifier id << 24) | (quantizer id << 16) | the quantizer's format parameter
// (engine/composition.hpp), and a receiver accepts only frames with its own codec id, so two
// policies of one kind sharing an id would let a receiver read another codec's frames as its
// own. The static_asserts below keep the ids of each kind distinct.
//
// Policy ids are bytes: 0 is reserved (no policy), 1 .. 127 belong to the library's policies,
// first_user (128) .. 255 to policies defined outside it. The composition rejects a policy
// whose id lies in the library's range unless it is one of the library's own (library_policy
// below). Partitioners and feedback policies have no id: they change which frames are sent,
// not how a frame is read.

#include <cstddef>
#include <cstdint>

namespace gradcomp {

// The library's policies, declared here so that library_policy can name them.
namespace quantize {
struct none;
struct bf16;
struct fp16;
enum class fp8_format : std::uint8_t;
template <fp8_format Format>
struct fp8;
enum class int_range : std::uint8_t;
template <unsigned Bits, int_range Range>
struct int_block;
template <unsigned Bits>
struct qsgd;
struct terngrad;
struct sign;
template <unsigned Bits>
struct piecewise;
struct natural;
}  // namespace quantize
namespace sparsify {
struct dense;
struct topk;
struct threshold;
struct randomk;
struct row_topk;
}  // namespace sparsify

namespace ids {

inline constexpr std::uint8_t first_user = 128;  // ids first_user .. 255: policies outside the library

namespace sparsifier {
inline constexpr std::uint8_t dense = 1;
inline constexpr std::uint8_t topk = 2;
inline constexpr std::uint8_t threshold = 3;
inline constexpr std::uint8_t randomk = 4;
inline constexpr std::uint8_t row_topk = 5;
inline constexpr std::uint8_t all[] = {dense, topk, threshold, randomk, row_topk};
}  // namespace sparsifier

namespace quantizer {
inline constexpr std::uint8_t none = 1;
inline constexpr std::uint8_t bf16 = 2;
inline constexpr std::uint8_t fp16 = 3;
inline constexpr std::uint8_t fp8_e4m3 = 4;
inline constexpr std::uint8_t fp8_e5m2 = 5;
inline constexpr std::uint8_t int_block = 6;
inline constexpr std::uint8_t qsgd = 7;
inline constexpr std::uint8_t terngrad = 8;
inline constexpr std::uint8_t sign = 9;
inline constexpr std::uint8_t piecewise = 10;
inline constexpr std::uint8_t natural = 11;
inline constexpr std::uint8_t all[] = {none, bf16, fp16, fp8_e4m3, fp8_e5m2, int_block, qsgd, terngrad, sign, piecewise, natural};
}  // namespace quantizer

// Transforms (transform/policy.hpp): the low byte of the frame header's transform word; 0 is
// the identity, which writes no word.
namespace transform {
inline constexpr std::uint8_t hadamard = 1;
inline constexpr std::uint8_t dct = 2;
inline constexpr std::uint8_t all[] = {hadamard, dct};
}  // namespace transform

// Four ASCII bytes read as a little-endian u32, as the tags below sit in memory.
consteval std::uint32_t tag_of(const char (&s)[5]) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(s[0])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[3])) << 24;
}

// Tags that open what gradcomp writes (docs/wire-format.md), so one kind of record is never
// read as another.
namespace tag {
inline constexpr std::uint32_t frame = tag_of("GCFR");            // a compressed chunk (core/frame.hpp)
inline constexpr std::uint32_t checkpoint = tag_of("GCST");       // a compressor's state (state.hpp)
inline constexpr std::uint32_t tagc_checkpoint = tag_of("GCTC");  // a TAGC rank's state (tagc/checkpoint.hpp)
inline constexpr std::uint32_t tagc_codec = tag_of("TAGC");       // first word of the record tagc::codec_id hashes
inline constexpr std::uint32_t shard_slot = tag_of("GCSL");       // a slot of the sharded path (gradcomp/sharded.hpp)
inline constexpr std::uint32_t sharded_checkpoint = tag_of("GCSH");  // a sharded codec's state (sharded/checkpoint.hpp)
inline constexpr std::uint32_t localsteps_checkpoint = tag_of("GCLS");  // a local-steps synchroniser's state (localsteps/checkpoint.hpp)
inline constexpr std::uint32_t all[] = {frame, checkpoint, tagc_checkpoint, tagc_codec, shard_slot, sharded_checkpoint, localsteps_checkpoint};
}  // namespace tag

template <class T, std::size_t N>
consteval bool distinct(const T (&v)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j)
      if (v[i] == v[j]) return false;
  return true;
}

template <std::size_t N>
consteval bool library_range(const std::uint8_t (&v)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (v[i] == 0 || v[i] >= first_user) return false;
  return true;
}

static_assert(distinct(sparsifier::all) && library_range(sparsifier::all),
              "gradcomp::ids: sparsifier ids must be distinct and in [1, first_user)");
static_assert(distinct(quantizer::all) && library_range(quantizer::all),
              "gradcomp::ids: quantizer ids must be distinct and in [1, first_user)");
static_assert(distinct(transform::all) && library_range(transform::all),
              "gradcomp::ids: transform ids must be distinct and in [1, first_user)");
static_assert(distinct(tag::all), "gradcomp::ids: record tags must be distinct");

// An id a policy outside the library may take (a wider integer is checked too: the codec id
// keeps 8 bits of it).
consteval bool user_id(std::uint64_t id) { return id >= first_user && id <= 0xff; }

// The library's policies, the only ones whose ids lie below first_user.
template <class P>
inline constexpr bool library_policy = false;
template <>
inline constexpr bool library_policy<quantize::none> = true;
template <>
inline constexpr bool library_policy<quantize::bf16> = true;
template <>
inline constexpr bool library_policy<quantize::fp16> = true;
template <quantize::fp8_format F>
inline constexpr bool library_policy<quantize::fp8<F>> = true;
template <unsigned B, quantize::int_range R>
inline constexpr bool library_policy<quantize::int_block<B, R>> = true;
template <unsigned B>
inline constexpr bool library_policy<quantize::qsgd<B>> = true;
template <>
inline constexpr bool library_policy<quantize::terngrad> = true;
template <>
inline constexpr bool library_policy<quantize::sign> = true;
template <unsigned B>
inline constexpr bool library_policy<quantize::piecewise<B>> = true;
template <>
inline constexpr bool library_policy<quantize::natural> = true;
template <>
inline constexpr bool library_policy<sparsify::dense> = true;
template <>
inline constexpr bool library_policy<sparsify::topk> = true;
template <>
inline constexpr bool library_policy<sparsify::threshold> = true;
template <>
inline constexpr bool library_policy<sparsify::randomk> = true;
template <>
inline constexpr bool library_policy<sparsify::row_topk> = true;

// What the composition requires of a sparsifier's or quantizer's id.
template <class P>
concept id_allowed = library_policy<P> || requires { requires user_id(P::id); };

}  // namespace ids
}  // namespace gradcomp
