#pragma once
// One rank's TAGC state: what outlives a step (residual, per-shard thresholds, step, sampling
// key: tagc/checkpoint.hpp saves it) and the step's scratch (the received union, the sketch
// size, the workspace), sized once by codec::make_state so that a step never allocates.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../cpu/threshold_select.hpp"
#include "../sketch/count_sketch.hpp"
#include "config.hpp"

namespace gradcomp::tagc {

// Where a rank is within a step; the codec refuses calls out of this order.
enum class stage : std::uint8_t {
  encode_bitmap,   // next: encode(0)
  receive_bitmap,  // next: receive(0) with the reduced bitmap
  encode_sketch,   // next: encode(1)
  receive_sketch,  // next: receive(1) with the reduced sketch (whole or this rank's shard)
  done,            // next: finish_step
};

struct state {
  // --- Checkpointed.
  std::size_t size = 0;          // gradient elements
  std::uint32_t world = 1;       // ranks (W)
  std::uint32_t rank = 0;        // this rank
  std::uint64_t step = 0;        // advanced by finish_step
  std::uint32_t key = 0;         // key of the threshold sampling (config::seed at make_state)
  std::vector<float> residual;   // `size` floats: what error feedback still owes
  std::vector<float> thresholds;  // `world` floats: each shard's last |x| threshold (0: none yet)
  // --- This step's (not checkpointed).
  stage at = stage::encode_bitmap;
  std::uint32_t rows = 0;                // r of this step's sketch (after receive(0))
  std::vector<std::uint32_t> union_bits;  // bitmap_words(size): the union of kept positions
  sketch::peel_stats stats{};            // the last receive(1): items, peeled, rounds
  sketch::peel_stats own{};              // the last encode(1): this rank's own cells decoded
  std::vector<std::byte> workspace;      // carved by workspace_layout
};

// Byte offsets of the workspace's arrays (8-byte aligned), for a buffer of n elements over
// `world` ranks.
struct workspace_layout {
  std::size_t selector = 0;    // cpu::threshold_selector of one shard
  std::size_t kept = 0;        // u32 kept indices of one shard
  std::size_t shard_bits = 0;  // u32 bitmap of one shard of the union
  std::size_t lanes = 0;       // u32 union positions per lane of one shard
  std::size_t acc = 0;         // fp32 accumulator of one shard's bf16 cells
  std::size_t peel = 0;        // sketch::peel_workspace_bytes of one shard
  std::size_t conveyed = 0;    // fp32: one shard decoded from this rank's own cells
  std::size_t total = 0;
};

inline workspace_layout layout_for(const config& c, std::size_t n, std::uint32_t world) {
  const std::size_t s = summable::shard_size(n, world);
  const std::uint32_t r = max_rows(c, n, world);
  const sketch::geometry g{static_cast<std::uint32_t>(s), c.block, static_cast<std::uint32_t>((s + c.block - 1) / c.block), r};
  workspace_layout l;
  std::size_t at = 0;
  const auto take = [&](std::size_t& field, std::size_t bytes) {
    field = at;
    at += align8(bytes);
  };
  take(l.selector, cpu::threshold_selector::workspace_bytes(c.select, s));
  take(l.kept, 4 * sparsify::threshold::kept(c.select, s));
  take(l.shard_bits, 4 * sketch::bitmap_words(s));
  take(l.lanes, 4 * lanes_of(c, s));
  take(l.acc, c.cells == summable::wire_type::bf16 ? 4 * g.cells() : 0);
  take(l.peel, sketch::peel_workspace_bytes(g, max_items(c, n, world)));
  take(l.conveyed, 4 * s);
  l.total = at;
  return l;
}

// Copies bits [first, first + count) of `src` to `dst` (bitmap_words(count) words), the bits past
// `count` zero. Precondition: first + count <= 32 * src.size().
inline void copy_bits(std::span<const std::uint32_t> src, std::size_t first, std::size_t count, std::uint32_t* dst) {
  const std::size_t w0 = first / 32, words = sketch::bitmap_words(count);
  const unsigned shift = static_cast<unsigned>(first % 32);
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint64_t lo = src[w0 + w];
    const std::uint64_t hi = shift != 0 && w0 + w + 1 < src.size() ? src[w0 + w + 1] : 0;
    dst[w] = static_cast<std::uint32_t>((lo | hi << 32) >> shift);
  }
  if (words > 0) dst[words - 1] &= sketch::bitmap_tail_mask(count);
}

}  // namespace gradcomp::tagc
