#pragma once
// The four policy kinds. A policy opts in with `using policy_kind = gradcomp::<kind>_tag;`
// and then must provide the members its concept lists. compressor<> checks the tag first and
// each member separately, so a mistake is reported by name rather than as a template dump.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "status.hpp"

namespace gradcomp {

struct partitioner_tag {};
struct sparsifier_tag {};
struct quantizer_tag {};
struct feedback_tag {};

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

// --- Sparsifier: which elements of a chunk are sent.
template <class S>
concept sparsifier_members = requires(const typename S::config& c, std::size_t n) {
  { S::id } -> std::convertible_to<std::uint8_t>;
  { S::is_dense } -> std::convertible_to<bool>;
  { S::kept(c, n) } -> std::same_as<std::size_t>;
};
template <class S>
concept sparsifier_policy = has_policy_kind<S, sparsifier_tag> && has_validate<S> && sparsifier_members<S>;

// --- Quantizer: how each sent value becomes a code, and back.
template <class Q>
concept quantizer_codes = requires { typename Q::code_type; } && std::unsigned_integral<typename Q::code_type> &&
                          requires {
                            { Q::bits } -> std::convertible_to<unsigned>;
                          };
template <class Q>
concept quantizer_encode = has_config<Q> && quantizer_codes<Q> && requires(const typename Q::config& c, float x) {
  { Q::encode(c, x) } -> std::same_as<typename Q::code_type>;
};
template <class Q>
concept quantizer_decode = has_config<Q> && quantizer_codes<Q> &&
                           requires(const typename Q::config& c, typename Q::code_type code) {
                             { Q::decode(c, code) } -> std::same_as<float>;
                           };
template <class Q>
concept quantizer_traits = has_config<Q> && requires(const typename Q::config& c) {
  { Q::id } -> std::convertible_to<std::uint8_t>;
  { Q::unbiased } -> std::convertible_to<bool>;
  { Q::summable } -> std::convertible_to<bool>;
  { Q::format_param(c) } -> std::same_as<std::uint16_t>;
};
template <class Q>
concept quantizer_policy = has_policy_kind<Q, quantizer_tag> && has_validate<Q> && quantizer_codes<Q> &&
                    quantizer_encode<Q> && quantizer_decode<Q> && quantizer_traits<Q>;

// --- Feedback: what happens to what was not sent.
template <class F>
concept feedback_members = has_config<F> && requires(const typename F::config& c, float x) {
  { F::has_state } -> std::convertible_to<bool>;
  { F::combine(c, x, x) } -> std::same_as<float>;
  { F::remainder(c, x, x) } -> std::same_as<float>;
};
template <class F>
concept feedback_policy = has_policy_kind<F, feedback_tag> && has_validate<F> && feedback_members<F>;

}  // namespace gradcomp
