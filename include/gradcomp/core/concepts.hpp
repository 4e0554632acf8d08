#pragma once
// The five policy kinds. A policy opts in with `using policy_kind = gradcomp::<kind>_tag;`
// and then must provide the members its concept lists. compressor<> checks the tag first and
// each member separately, so a mistake is reported by name rather than as a template dump.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "config.hpp"
#include "status.hpp"

namespace gradcomp {

struct partitioner_tag {};
struct sparsifier_tag {};
struct quantizer_tag {};
struct feedback_tag {};
struct transform_tag {};

struct chunk_range {
  std::size_t offset;  // first element of the chunk in the gradient buffer
  std::size_t count;   // elements in the chunk
  friend bool operator==(const chunk_range&, const chunk_range&) = default;
};

template <class P, class Tag>
concept has_policy_kind = requires { typename P::policy_kind; } && std::same_as<typename P::policy_kind, Tag>;

template <class P>
concept has_config = requires { typename P::config; } && std::default_initializable<typename P::config>;

template <class P>
concept has_validate = has_config<P> && requires(const typename P::config& c) {
  { P::validate(c) } -> std::same_as<status>;
};

// --- Partitioner: host-side plan cutting a buffer of n elements into chunks.
template <class P>
concept partitioner_members = requires(const typename P::config& c, std::size_t n) {
  { P::chunk_count(c, n, n) } -> std::same_as<std::size_t>;
  { P::chunk_at(c, n, n, n) } -> std::same_as<chunk_range>;
};
template <class P>
concept partitioner_policy = has_policy_kind<P, partitioner_tag> && has_validate<P> && partitioner_members<P>;

// --- Sparsifier: which elements of a chunk are sent. The selection algorithm is a backend
// skeleton named by `kind`; the sparsifier holds its config and per-element math.
enum class selection : std::uint8_t {
  dense,       // every element, no index section
  exact_topk,  // the k largest |x| of the chunk (cpu/topk_select.hpp)
  threshold,   // |x| >= a threshold estimated from a sample (cpu/threshold_select.hpp)
  random,      // a keyed random k-subset, indices not sent (core/permutation.hpp)
  row_topk,    // the k largest |x| of each row (cpu/row_topk.hpp)
};

template <class S>
concept sparsifier_members = requires(const typename S::config& c, std::size_t n) {
  { S::id } -> std::convertible_to<std::uint8_t>;
  { S::is_dense } -> std::convertible_to<bool>;
  { S::kind } -> std::convertible_to<selection>;
  { S::kept(c, n) } -> std::same_as<std::size_t>;
};
template <class S>
concept sparsifier_policy = has_policy_kind<S, sparsifier_tag> && has_validate<S> && sparsifier_members<S>;

// --- Quantizer: how the sent values of a chunk become codes, and back.
// Values are encoded in groups of group_size(c) consecutive sent values (the last group of a
// chunk may be shorter); group_size 0 means no groups. fit() computes a group's `meta`
// (scales) from its values; meta travels in meta_bytes bytes per group. encode() maps one
// value to a code of `bits` bits, given a uniform random number when stochastic(c) (16
// random bits in the high half: random16_at in core/philox.hpp).
// Largest group a quantizer may use (a group's statistics are reduced in one block).
inline constexpr std::size_t max_group_size = 4096;

template <class Q>
concept quantizer_codes = requires { typename Q::code_type; } && std::unsigned_integral<typename Q::code_type> &&
                          requires {
                            { Q::bits } -> std::convertible_to<unsigned>;
                          };
template <class Q>
concept quantizer_groups = has_config<Q> && requires { typename Q::meta; } &&
                           requires(const typename Q::config& c, const float* x, std::size_t n,
                                    const typename Q::meta& m, std::byte* out, const std::byte* in) {
                             { Q::meta_bytes } -> std::convertible_to<std::size_t>;
                             { Q::group_size(c) } -> std::same_as<std::size_t>;
                             { Q::fit(c, x, n) } -> std::same_as<typename Q::meta>;
                             { Q::store_meta(m, out) } -> std::same_as<void>;
                             { Q::load_meta(in) } -> std::same_as<typename Q::meta>;
                             { Q::check_meta(c, m) } -> std::same_as<status>;
                           };
template <class Q>
concept quantizer_encode = has_config<Q> && quantizer_codes<Q> && quantizer_groups<Q> &&
                           requires(const typename Q::config& c, const typename Q::meta& m, float x, std::uint32_t u) {
                             { Q::encode(c, m, x, u) } -> std::same_as<typename Q::code_type>;
                           };
template <class Q>
concept quantizer_decode = has_config<Q> && quantizer_codes<Q> && quantizer_groups<Q> &&
                           requires(const typename Q::config& c, const typename Q::meta& m, typename Q::code_type code) {
                             { Q::decode(c, m, code) } -> std::same_as<float>;
                           };
template <class Q>
concept quantizer_traits = has_config<Q> && requires(const typename Q::config& c) {
  { Q::id } -> std::convertible_to<std::uint8_t>;
  { Q::unbiased(c) } -> std::same_as<bool>;
  { Q::summable } -> std::convertible_to<bool>;
  { Q::stochastic(c) } -> std::same_as<bool>;
  { Q::format_param(c) } -> std::same_as<std::uint16_t>;
};
template <class Q>
concept quantizer_policy = has_policy_kind<Q, quantizer_tag> && has_validate<Q> && quantizer_codes<Q> &&
                           quantizer_groups<Q> && quantizer_encode<Q> && quantizer_decode<Q> && quantizer_traits<Q>;
// Defaults for quantizers without groups or metadata (the casts, natural): derive and add
// code_type, bits, id, unbiased, summable, encode and decode (and stochastic where random
// numbers round). Quantizers with groups derive from quantize::grouped_quantizer
// (quantize/group.hpp) instead.
struct ungrouped_quantizer {
  using policy_kind = quantizer_tag;
  struct meta {};
  static constexpr std::size_t meta_bytes = 0;
  struct config {};
  static constexpr status validate(const config&) { return {}; }
  static constexpr std::uint16_t format_param(const config&) { return 0; }
  GRADCOMP_HD static constexpr bool stochastic(const config&) { return false; }
  GRADCOMP_HD static constexpr std::size_t group_size(const config&) { return 0; }
  GRADCOMP_HD static constexpr meta fit(const config&, const float*, std::size_t) { return {}; }
  GRADCOMP_HD static constexpr void store_meta(const meta&, std::byte*) {}
  GRADCOMP_HD static constexpr meta load_meta(const std::byte*) { return {}; }
  GRADCOMP_HD static constexpr status check_meta(const config&, const meta&) { return {}; }
};

// --- Feedback: what happens to what was not sent.
template <class F>
concept feedback_members = has_config<F> && requires(const typename F::config& c, float x) {
  { F::has_state } -> std::convertible_to<bool>;
  { F::combine(c, x, x) } -> std::same_as<float>;
  { F::remainder(c, x, x) } -> std::same_as<float>;
};
// Optional: a feedback with a velocity per element (momentum correction) declares
// has_momentum = true, velocity(c, g, u) -> u' and clip_scale(c, squared_norm) -> factor; the
// compressor then keeps state::momentum, computes x = combine(c, u', e) and zeroes u where a
// value was sent.
template <class F>
concept momentum_feedback = feedback_members<F> && requires(const typename F::config& c, float x) {
  requires F::has_momentum;
  { F::velocity(c, x, x) } -> std::same_as<float>;
  { F::clip_scale(c, x) } -> std::same_as<float>;
};

template <class F>
concept feedback_policy = has_policy_kind<F, feedback_tag> && has_validate<F> && feedback_members<F>;

// --- Transform (optional, the identity by default): an orthogonal map applied per block of a
// chunk before selection and quantization, inverted after decoding (transform/policy.hpp).
// `word(config)` and `seed(config)` go into the frame header, so a receiver with another
// transform refuses the frame; the identity's are 0. Blocks are powers of two of at most 4096
// values; tmp holds as many floats.
template <class X>
concept transform_members = requires(const typename X::config& c, std::uint32_t chunk, std::size_t n, float* x) {
  { X::is_identity } -> std::convertible_to<bool>;
  { X::word(c) } -> std::same_as<std::uint32_t>;
  { X::seed(c) } -> std::same_as<std::uint32_t>;
  { X::block(c) } -> std::same_as<std::size_t>;
  X::forward_block(c, chunk, n, x, x, n);
  X::inverse_block(c, chunk, n, x, x, n);
};

template <class X>
concept transform_policy = has_policy_kind<X, transform_tag> && has_validate<X> && transform_members<X>;

}  // namespace gradcomp
