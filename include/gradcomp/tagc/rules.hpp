#pragma once
// What both TAGC codecs (the host's tagc::codec and the per-thread one that cuda::tagc::codec
// runs) decide the same way, written once: the call order, the phases' shapes, the checks of
// a call's arguments, and the union's rule for r. Each codec calls these and supplies only its
// kernels (cpu/tagc.hpp, tagc/flow.hpp, tagc/*_steps.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../sketch/bitmap.hpp"
#include "config.hpp"

namespace gradcomp::tagc {

// Where a rank is within a step; the codecs refuse calls out of this order.
enum class stage : std::uint8_t {
  encode_bitmap,   // next: encode(0)
  receive_bitmap,  // next: receive(0) with the reduced bitmap
  encode_sketch,   // next: encode(1)
  receive_sketch,  // next: receive(1) with the reduced sketch (whole or this rank's shard)
  done,            // next: finish_step
};

namespace detail {

inline status out_of_order() {
  return {errc::invalid_argument, "TAGC phases out of order: encode(0), receive(0), encode(1), receive(1), finish_step"};
}

inline status check_world(std::uint32_t world, std::uint32_t rank) {
  if (world == 0 || rank >= world) return {errc::invalid_argument, "TAGC state needs world >= 1 and rank < world"};
  return {};
}

// Gradients of n elements over `world` ranks fit the codec's 32-bit indices.
inline status check_sizes(const config& c, std::size_t n, std::uint32_t world) {
  if (summable::shard_size(n, world) > 0xffffffffu) return {errc::count_too_large, "TAGC shards hold at most 2^32 - 1 elements"};
  if (std::uint64_t{max_rows(c, n, world)} * c.block > 0xffffffffu)
    return {errc::count_too_large, "TAGC sketch cells do not fit 32-bit cell indices"};
  return {};
}

// Phase 0: the kept positions, 1 bit each (OR) or in the sum-safe packing (SUM); not shardable.
inline summable::phase bitmap_phase(const config& c, std::size_t n, std::uint32_t world) {
  if (c.bitmap == bitmap_mode::bitwise_or)
    return summable::phase{"bitmap", summable::wire_type::u32, summable::reduction::bitwise_or, sketch::bitmap_words(n), world,
                           false, 0};
  const auto l = sketch::sum_safe_layout::make(world);
  return summable::phase{"bitmap", summable::wire_type::u32, summable::reduction::sum, l.words(n), world, false, l.width};
}

// Phase 1: W shards of r B cells, summed; shard i's cells go to rank i in a reduce-scatter.
inline summable::phase sketch_phase(const config& c, std::uint32_t world, std::uint32_t rows) {
  return summable::phase{"sketch", c.cells, summable::reduction::sum, std::size_t{world} * rows * c.block, world, true, 0};
}

// The largest buffer any phase of a step can need (a sketch with r = max_rows).
inline std::size_t max_phase_bytes(const config& c, std::size_t n, std::uint32_t world) {
  return std::max(bitmap_phase(c, n, world).bytes(), sketch_phase(c, world, max_rows(c, n, world)).bytes());
}

// A phase buffer of exactly the phase's bytes, aligned for its element type.
inline status check_buffer(const summable::phase& p, std::size_t bytes, const void* data, const char* what) {
  if (bytes != p.bytes()) return {errc::size_mismatch, what};
  return summable::check_alignment(p, data);
}

// What every phase call of either codec checks first, in this order: the state and phase
// (describe(k)), the call order (`at`), then, given a buffer of exactly the phase's bytes, its
// size and alignment (`what`: the error's message).
template <class Codec, class State>
result<summable::phase> open_call(const Codec& c, std::size_t k, const State& st, stage at) {
  result<summable::phase> p = c.describe(k, st);
  if (p && st.at != at) return out_of_order();
  return p;
}
template <class Codec, class State>
result<summable::phase> open_call(const Codec& c, std::size_t k, const State& st, stage at, std::span<const std::byte> buffer,
                                  const char* what) {
  result<summable::phase> p = open_call(c, k, st, at);
  if (!p) return p;
  if (status s = check_buffer(*p, buffer.size(), buffer.data(), what); !s) return s;
  return p;
}

// receive(1)'s output: n values (the whole sketch) or this rank's shard_of range.
inline status check_output(std::size_t n, std::uint32_t world, std::uint32_t rank, summable::received kind, std::size_t size) {
  if (size != (kind == summable::received::whole ? n : summable::shard_of(n, world, rank).count))
    return {errc::size_mismatch, "output differs from the received range"};
  return {};
}

// r of a step from the union (receive(0), the same on every rank): 0 when some shard holds more
// positions than W ranks can keep (`max_items`), else rows_for() of the fullest lane (B > 1)
// or of the fullest shard (B = 1).
GRADCOMP_HD inline std::uint32_t union_rows(const config& c, std::uint64_t shard_size, std::uint64_t max_items,
                                            std::uint64_t most_items, std::uint64_t fullest_lane) {
  if (most_items > max_items) return 0;
  return rows_for(c, shard_size, c.block > 1 ? fullest_lane : most_items);
}

}  // namespace detail
}  // namespace gradcomp::tagc
