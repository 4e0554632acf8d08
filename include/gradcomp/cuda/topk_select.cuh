#pragma once
// CUDA skeleton for exact top-k: radix select on the 31-bit magnitude keys (abs_key) of every
// chunk at once, then an order-preserving compaction.
//
//   hist<0..2>: digits of 11, 10 and 10 bits (key bits 30..20, 19..10, 9..0). Each pass counts,
//               per chunk, the next digit of the keys that match the prefix found so far
//               (block histogram in shared memory, added to the chunk's global one).
//   find<p>:    one block per chunk walks its histogram from the top and keeps the bin that
//               holds the k-th largest key. After pass 2 the prefix is the threshold T, the
//               k-th largest key, and `take` the number of keys equal to T to keep.
//   count, scan, write: per tile, the keys > T and == T are counted, the counts are scanned
//               in tile order, and each selected element is written at
//                   (keys > T before it) + min(keys == T before it, take)
//               which keeps indices ascending and gives ties to the lower index: the same set
//               and order as the CPU (cpu/topk_select.hpp), which depend on the keys alone.
//
// The per-element decisions are the GRADCOMP_HD functions below; select_model() runs them
// sequentially on the host so that the tests check the algorithm without a GPU.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common.cuh"

#if defined(__CUDACC__)
#include <cub/block/block_scan.cuh>
#endif

namespace gradcomp::cuda::detail {

inline constexpr unsigned hist_bins = 2048;  // bins of the widest digit (pass 0)

GRADCOMP_HD constexpr unsigned digit_shift(int pass) { return pass == 0 ? 20u : pass == 1 ? 10u : 0u; }
GRADCOMP_HD constexpr unsigned digit_bins(int pass) { return pass == 0 ? 2048u : 1024u; }
GRADCOMP_HD constexpr std::uint32_t digit_of(std::uint32_t key, int pass) {
  return (key >> digit_shift(pass)) & (digit_bins(pass) - 1u);
}
// Whether a key matches the digits found by the passes before `pass`.
GRADCOMP_HD constexpr bool in_prefix(std::uint32_t key, int pass, std::uint32_t prefix) {
  return pass == 0 || (key >> digit_shift(pass - 1)) == prefix;
}

// Selection state of one chunk.
struct select_state {
  std::uint64_t need;       // rank (from 1, descending) of the k-th key among the prefix's keys
  std::uint64_t take;       // keys equal to the threshold that are kept
  std::uint32_t prefix;     // digits found so far
  std::uint32_t threshold;  // the k-th largest key (valid after pass 2, or when !active)
  std::uint32_t active;     // 0 < k < count: the passes are needed
  std::uint32_t reserved;
};

GRADCOMP_HD constexpr select_state initial_select(std::uint64_t kept, std::uint64_t count) {
  select_state s{kept, 0, 0, 0, kept > 0 && kept < count ? 1u : 0u, 0};
  if (kept >= count) {  // everything: every key is >= 0 and all equal ones are taken
    s.threshold = 0;
    s.take = ~std::uint64_t{0};
  } else if (kept == 0) {  // nothing: no 31-bit key reaches 2^32 - 1
    s.threshold = 0xffffffffu;
    s.take = 0;
  }
  return s;
}

// The state after a pass, given the bin holding the need-th key and the keys in higher bins.
GRADCOMP_HD constexpr select_state after_pass(select_state s, int pass, std::uint32_t bin, std::uint64_t above) {
  s.prefix = pass == 0 ? bin : (s.prefix << 10) | bin;
  s.need -= above;
  if (pass == 2) {
    s.threshold = s.prefix;
    s.take = s.need;
  }
  return s;
}

// Keys > T and == T met so far in a chunk, in index order.
struct select_cursor {
  std::uint64_t gt, eq;
};

// Whether an element with this key is selected, and its position in the chunk's output.
GRADCOMP_HD inline bool select_position(std::uint32_t key, const select_state& s, select_cursor& c, std::uint64_t& pos) {
  if (key > s.threshold) {
    pos = c.gt + (c.eq < s.take ? c.eq : s.take);
    ++c.gt;
    return true;
  }
  if (key == s.threshold) {
    const bool taken = c.eq < s.take;
    pos = c.gt + c.eq;
    ++c.eq;
    return taken;
  }
  return false;
}

// Host model: the GPU algorithm run sequentially on one chunk's keys.
inline std::vector<std::uint32_t> select_model(const std::vector<std::uint32_t>& keys, std::uint64_t k) {
  select_state s = initial_select(k, keys.size());
  for (int pass = 0; pass < 3 && s.active; ++pass) {
    std::vector<std::uint64_t> hist(digit_bins(pass), 0);
    for (std::uint32_t key : keys)
      if (in_prefix(key, pass, s.prefix)) ++hist[digit_of(key, pass)];
    std::uint64_t above = 0;
    std::uint32_t bin = digit_bins(pass) - 1;
    while (above + hist[bin] < s.need) above += hist[bin--];
    s = after_pass(s, pass, bin, above);
  }
  std::vector<std::uint32_t> out(k < keys.size() ? k : keys.size());
  select_cursor c{0, 0};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::uint64_t pos;
    if (select_position(keys[i], s, c, pos)) out.at(pos) = static_cast<std::uint32_t>(i);
  }
  return out;
}

// Counts of keys > T and == T, scanned over tiles.
struct tile_pair {
  std::uint64_t gt, eq;
};
struct tile_pair_add {
  GRADCOMP_HD tile_pair operator()(const tile_pair& a, const tile_pair& b) const { return {a.gt + b.gt, a.eq + b.eq}; }
};

#if defined(__CUDACC__)
// find<pass>: one block per chunk; thread t holds bins [t * per, (t + 1) * per).
template <int Pass>
__global__ void __launch_bounds__(threads) find_kernel(std::uint64_t chunks, select_state* sel, std::uint32_t* hist,
                                                       const control* ctl) {
  using scan = cub::BlockScan<std::uint64_t, threads>;
  __shared__ typename scan::TempStorage tmp;
  if (ctl->error != 0) return;
  constexpr unsigned per = digit_bins(Pass) / threads;
  for (std::uint64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const select_state s = sel[c];
    if (!s.active) continue;  // the same for the whole block
    std::uint32_t* h = hist + c * hist_bins;
    std::uint32_t v[per];
    std::uint64_t sum = 0;
    for (unsigned b = 0; b < per; ++b) sum += v[b] = h[threadIdx.x * per + b];
    std::uint64_t inclusive, total;
    scan(tmp).InclusiveSum(sum, inclusive, total);
    __syncthreads();  // every thread has read sel[c] before one rewrites it
    std::uint64_t above = total - inclusive;  // keys in the bins of higher threads
    for (int b = per - 1; b >= 0; --b) {
      if (above < s.need && above + v[b] >= s.need) sel[c] = after_pass(s, Pass, threadIdx.x * per + b, above);
      above += v[b];
    }
    for (unsigned b = 0; b < per; ++b) h[threadIdx.x * per + b] = 0;  // ready for the next pass
    __syncthreads();
  }
}

// Exclusive scan of the tile counts, in place, by one block (tiles are few: n / 32768).
// A template only so that every translation unit may define it (header-only library).
template <int = 0>
__global__ void __launch_bounds__(threads) scan_tiles_kernel(tile_pair* counts, std::uint64_t tiles, const control* ctl) {
  using scan = cub::BlockScan<tile_pair, threads>;
  __shared__ typename scan::TempStorage tmp;
  if (ctl->error != 0) return;
  tile_pair running{0, 0};
  for (std::uint64_t base = 0; base < tiles; base += threads) {
    const std::uint64_t i = base + threadIdx.x;
    const tile_pair v = i < tiles ? counts[i] : tile_pair{0, 0};
    tile_pair before, total;
    scan(tmp).ExclusiveScan(v, before, tile_pair{0, 0}, tile_pair_add{}, total);
    if (i < tiles) counts[i] = tile_pair_add{}(running, before);
    running = tile_pair_add{}(running, total);
    __syncthreads();
  }
}
#endif

}  // namespace gradcomp::cuda::detail
