#pragma once
// Summable phases: the contract between a codec whose buffers a transport may reduce
// element-wise and the transport (docs/design.md, "Aggregation paths"; docs/tagc.md).
//
// A summable codec runs a step as a fixed sequence of phases. For each phase k the rank asks
// describe(k, st) for the buffer's element type, reduction, element count and whether a
// reduce-scatter is enough; encode(k, ...) fills the buffer; the caller runs it through ANY
// collective that applies the reduction (all-reduce, reduce to a root, reduce-scatter for a
// shardable phase) and hands the reduced buffer back with receive(k, ...). A phase's count may
// depend on what earlier phases received (TAGC sizes its sketch from the union of kept
// positions), which is why describe takes the state. Buffers are raw native-endian arrays (the
// transport adds them as numbers), without a frame header; receive() checks their size and
// values before writing anything.
//
// Gather-only codecs (compressor<> frames: top-k indices, per-rank scales, CRCs) must not be
// summed: aggregation_of_v says which kind a type is, and the summable entry points refuse a
// gather codec at compile time with a readable message.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/status.hpp"

namespace gradcomp::summable {

// What a transport must apply to the ranks' buffers, element by element.
enum class reduction : std::uint8_t {
  sum = 1,         // MPI_SUM, ncclSum (integers wrap: see phase::headroom_bits)
  max = 2,         // MPI_MAX, ncclMax
  bitwise_or = 3,  // MPI_BOR (NCCL has none: codecs offer a sum-safe alternative)
};

// Element type of a phase buffer (what the transport's datatype must be).
enum class wire_type : std::uint8_t {
  u32 = 1,   // MPI_UINT32_T, ncclUint32
  f32 = 2,   // MPI_FLOAT, ncclFloat32
  bf16 = 3,  // ncclBfloat16 (MPI: a user datatype and op)
  f16 = 4,   // ncclFloat16
};

enum class aggregation : std::uint8_t {
  gather,    // payloads differ per rank: all-gather them, decode and accumulate each
  summable,  // payloads may be reduced element-wise by the transport, in phases
  sharded,   // per-shard payloads, moved by all-to-all (and all-gather): gradcomp/sharded.hpp
};

constexpr std::size_t wire_bytes(wire_type t) { return t == wire_type::bf16 || t == wire_type::f16 ? 2 : 4; }

constexpr const char* to_string(reduction r) {
  switch (r) {
    case reduction::sum: return "sum";
    case reduction::max: return "max";
    case reduction::bitwise_or: return "bitwise or";
  }
  return "unknown reduction";
}
constexpr const char* to_string(wire_type t) {
  switch (t) {
    case wire_type::u32: return "u32";
    case wire_type::f32: return "f32";
    case wire_type::bf16: return "bf16";
    case wire_type::f16: return "f16";
  }
  return "unknown type";
}

struct phase {
  const char* name = "";
  wire_type type = wire_type::f32;
  reduction op = reduction::sum;
  std::size_t count = 0;   // elements of the buffer every rank contributes
  std::uint32_t world = 1;  // ranks whose buffers are reduced
  // count = world * shard_count(): rank r needs only elements [r * shard_count(), (r + 1) *
  // shard_count()) of the result, so a reduce-scatter (equal counts) suffices.
  bool shardable = false;
  // An integer SUM phase packs fields of this many bits that a sum over `world` ranks never
  // carries out of (0: not an integer sum).
  std::uint32_t headroom_bits = 0;

  constexpr std::size_t element_bytes() const { return wire_bytes(type); }
  constexpr std::size_t bytes() const { return count * element_bytes(); }
  constexpr std::size_t shard_count() const { return shardable && world > 0 ? count / world : count; }
  constexpr std::size_t shard_bytes() const { return shard_count() * element_bytes(); }
};

// What a received buffer holds: the whole reduced buffer (all-reduce, root of a reduce) or the
// receiving rank's shard of it (reduce-scatter of a shardable phase).
enum class received : std::uint8_t { whole, shard };

inline result<received> classify(const phase& p, std::size_t bytes) {
  if (bytes == p.bytes()) return received::whole;
  if (p.shardable && bytes == p.shard_bytes()) return received::shard;
  return status{errc::size_mismatch, p.shardable ? "reduced buffer is neither the phase's whole buffer nor one shard of it"
                                                 : "reduced buffer differs from the phase's size (not shardable)"};
}

// The element type's alignment in a received or sent byte buffer.
inline status check_alignment(const phase& p, const void* data) {
  if (reinterpret_cast<std::uintptr_t>(data) % p.element_bytes() != 0)
    return {errc::invalid_argument, "phase buffer is not aligned to its element type"};
  return {};
}

// --- Shards of a flat buffer of n elements over `world` ranks (the reduce-scatter layout):
// shard_size = ceil(n / world); rank r owns [r * shard_size, min(n, (r + 1) * shard_size)).
// Shards past n are empty; phase buffers pad every shard to shard_size (zeros), so that a
// reduce-scatter moves equal counts.
constexpr std::size_t shard_size(std::size_t n, std::uint32_t world) { return world == 0 ? 0 : (n + world - 1) / world; }

constexpr chunk_range shard_of(std::size_t n, std::uint32_t world, std::uint32_t rank) {
  const std::size_t s = shard_size(n, world);
  const std::size_t first = static_cast<std::size_t>(rank) * s < n ? static_cast<std::size_t>(rank) * s : n;
  const std::size_t last = first + s < n ? first + s : n;
  return {first, last - first};
}

// --- Which aggregation a codec type supports. A type declares `static constexpr
// summable::aggregation aggregation_kind = ...`; one that does not (every compressor<>) is
// gather-only.
template <class C>
concept declares_aggregation = requires {
  { C::aggregation_kind } -> std::convertible_to<aggregation>;
};

template <class C>
consteval aggregation aggregation_of() {
  if constexpr (declares_aggregation<C>) {
    return C::aggregation_kind;
  } else {
    return aggregation::gather;
  }
}
template <class C>
inline constexpr aggregation aggregation_of_v = aggregation_of<C>();
template <class C>
inline constexpr bool is_summable_v = aggregation_of_v<C> == aggregation::summable;

// The members every summable codec has (summable/values.hpp, gradcomp/tagc.hpp).
template <class C>
concept summable_codec =
    is_summable_v<C> && requires(const C& c, typename C::state_type& st, std::size_t k, std::span<const float> grad,
                                 std::span<std::byte> out, std::span<const std::byte> in, std::span<float> values) {
      { c.validate() } -> std::same_as<status>;
      { c.phase_count() } -> std::same_as<std::size_t>;
      { c.describe(k, st) } -> std::same_as<result<phase>>;
      { c.encode(k, grad, st, out) } -> std::same_as<status>;
      { c.receive(k, st, in, values) } -> std::same_as<status>;
      { c.finish_step(st) } -> std::same_as<void>;
    };

// Compile-time guard of every entry point that sums a codec's buffers: a gather-only codec
// is refused with a sentence instead of a template dump.
template <class C>
consteval void require_summable() {
  static_assert(is_summable_v<C>,
                "gradcomp::summable: this codec is gather-only (its payloads carry per-rank indices, scales or frame "
                "checksums): all-gather its frames and accumulate() each one instead of summing them");
  static_assert(!is_summable_v<C> || summable_codec<C>,
                "gradcomp::summable: a codec declaring aggregation::summable needs validate(), phase_count(), "
                "describe(k, state), encode(k, grad, state, buffer), receive(k, state, reduced, out) and finish_step(state)");
}

// One step of a summable codec with the caller's transport: for each phase, describe, encode
// into `send`, transport(phase, sent bytes, receive buffer) -> result<std::size_t> (the
// collective: the bytes it received, the whole buffer or this rank's shard), receive. `send` and
// `recv` must hold the largest phase buffer; `out` receives the last phase's values (the
// whole buffer or this rank's shard, matching what the transport returned).
template <class C, class State, class Transport>
status run_step(const C& codec, State& st, std::span<const float> grad, Transport&& transport,
                std::span<std::byte> send, std::span<std::byte> recv, std::span<float> out) {
  require_summable<C>();
  if constexpr (!summable_codec<C>) {
    return {errc::invalid_argument, "not a summable codec"};  // (refused at compile time above)
  } else {
    for (std::size_t k = 0; k < codec.phase_count(); ++k) {
      const result<phase> p = codec.describe(k, st);
      if (!p) return p.error();
      if (send.size() < p->bytes() || recv.size() < p->bytes())
        return {errc::buffer_too_small, "run_step buffers smaller than the phase"};
      if (status s = codec.encode(k, grad, st, send.first(p->bytes())); !s) return s;
      const result<std::size_t> got = transport(*p, std::span<const std::byte>(send.first(p->bytes())), recv);
      if (!got) return got.error();
      if (*got > recv.size()) return {errc::buffer_too_small, "transport reports more bytes than the receive buffer"};
      const bool last = k + 1 == codec.phase_count();
      if (status s = codec.receive(k, st, recv.first(*got), last ? out : std::span<float>{}); !s) return s;
    }
    codec.finish_step(st);
    return {};
  }
}

}  // namespace gradcomp::summable
