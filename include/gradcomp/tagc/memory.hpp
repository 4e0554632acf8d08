#pragma once
// The memory of the per-thread TAGC form (tagc/flow.hpp runs it): every size a
// rank's buffers need (sizes_for), the carving of the caller's state and workspace memory into
// the steps' arrays, the rank's device_state and the per-shard plan that make_state uploads.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sketch_steps.hpp"
#include "state.hpp"

namespace gradcomp::tagc {

// Where the sketch phase's shard i starts: i r B (packed: the host codec's bytes) or i R B
// (padded to the most rows, R = max_rows: a reduce-scatter needs no count from the device).
enum class sketch_layout : std::uint8_t { packed, padded };

namespace detail {


// Every size a rank's buffers need, from (config, n, world).
struct sizes {
  std::uint64_t n = 0, shard_size = 0, wps = 0, aligned = 0, sample = 0, tiles = 0, items = 0, max_cells = 0, lanes = 1;
  std::uint64_t bitmap_words = 0;  // phase 0's u32 count
  std::uint32_t world = 1, max_rows = 1, table_size = 0;
  int sample_bits = 32, slot_bits = 1;
};

inline result<sizes> sizes_for(const config& c, std::size_t n, std::uint32_t world) {
  if (status s = validate(c); !s) return s;
  if (status s = tagc::detail::check_world(world, 0); !s) return s;
  if (status s = tagc::detail::check_sizes(c, n, world); !s) return s;
  sizes z;
  z.n = n;
  z.world = world;
  z.shard_size = summable::shard_size(n, world);
  z.wps = sketch::bitmap_words(z.shard_size);
  z.aligned = std::uint64_t{world} * z.wps;
  for (std::uint32_t i = 0; i < world; ++i) {
    const std::size_t count = summable::shard_of(n, world, i).count;
    z.sample += sparsify::threshold::sample_size(c.select, count);
    z.tiles += (count + tie_tile - 1) / tie_tile;
  }
  z.items = std::uint64_t{world} * max_items(c, n, world);
  z.lanes = lanes_of(c, z.shard_size);
  if (z.world * z.lanes >= 0xffffffffu) return status{errc::count_too_large, "TAGC lanes of all shards do not fit 32-bit counters"};
  z.max_rows = max_rows(c, n, world);
  z.max_cells = std::uint64_t{world} * z.max_rows * c.block;
  if (z.max_cells >= 0xffffffffu) return status{errc::count_too_large, "TAGC sketch cells of all shards do not fit 32-bit cell indices"};
  if (3 * z.items > 0x7fffffffu || z.aligned >= 0x7fffffffu || z.sample > 0x7fffffffu)
    return status{errc::count_too_large, "TAGC on the GPU holds at most 715827882 union positions"};
  z.table_size = static_cast<std::uint32_t>(sparsify::threshold::table_size(c.select));
  for (std::uint32_t v = world - 1; v != 0; v >>= 1) ++z.sample_bits;
  while (z.slot_bits < 32 && (std::uint64_t{1} << z.slot_bits) <= z.max_cells) ++z.slot_bits;
  z.bitmap_words = c.bitmap == bitmap_mode::sum_safe ? sketch::sum_safe_layout::make(world).words(n) : sketch::bitmap_words(n);
  return z;
}

// Cuts caller memory into 256-byte aligned arrays; with a null base it only adds up the sizes.
class carver {
 public:
  explicit carver(std::byte* base) : base_(base) {}
  template <class T>
  T* take(std::uint64_t count) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + 255u) & ~std::size_t{255};
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// State memory: step, key and report in the first 256 bytes, then residual, thresholds, plan,
// table.
inline std::size_t carve_state(const sizes& z, std::byte* base, state_view& v) {
  carver m(base);
  std::byte* head = m.take<std::byte>(256);
  if (head != nullptr) {
    v.step = reinterpret_cast<std::uint64_t*>(head);
    v.key = reinterpret_cast<std::uint32_t*>(head + 8);
    v.report = reinterpret_cast<step_report*>(head + 16);
  }
  v.residual = m.take<float>(z.n);
  v.thresholds = m.take<float>(z.world);
  v.plan = m.take<shard_plan>(z.world);
  v.table = m.take<std::uint32_t>(z.table_size);
  return m.used();
}

inline std::size_t carve_work(const sizes& z, std::uint32_t max_rounds, std::size_t temp_bytes, std::byte* base, work_view& w,
                              std::byte*& temp) {
  carver m(base);
  w.sel = m.take<sparsify::detail::chunk_select>(z.world);
  w.pass_count = m.take<counter>(z.world);
  w.hist = m.take<counter>(std::uint64_t{z.world} * sparsify::detail::max_bins);
  w.tile_ties = m.take<counter>(z.tiles);
  w.tally = m.take<counter>(1);
  w.first_bad = m.take<counter>(1);
  w.flags = m.take<std::uint32_t>(2);
  w.sample_in = m.take<std::uint64_t>(z.sample);
  w.sample_out = m.take<std::uint64_t>(z.sample);
  w.aligned = m.take<std::uint32_t>(z.aligned);
  w.word_items = m.take<std::uint32_t>(z.aligned + 1);
  w.lane_items = m.take<counter>(z.world * z.lanes + 1);
  w.elem = m.take<std::uint32_t>(z.items);
  w.peeled_in = m.take<std::uint32_t>(z.items);
  w.info = m.take<std::uint8_t>(z.items);
  w.value = m.take<float>(z.items);
  w.keys_in = m.take<std::uint32_t>(3 * z.items);
  w.vals_in = m.take<std::uint32_t>(3 * z.items);
  w.keys_out = m.take<std::uint32_t>(3 * z.items);
  w.vals_out = m.take<std::uint32_t>(3 * z.items);
  w.start = m.take<std::uint32_t>(z.max_cells + 1);
  w.live = m.take<std::uint32_t>(z.max_cells);
  w.cell_residual = m.take<float>(z.max_cells);
  w.progress = m.take<std::uint32_t>(max_rounds);
  temp = m.take<std::byte>(temp_bytes);
  return m.used();
}

}  // namespace detail

// A rank's state in caller-owned (device) memory. The pointers are into that memory; `at` is
// the call order, kept on the host.
struct device_state {
  std::size_t size = 0;
  std::uint32_t world = 1, rank = 0;
  std::uint32_t codec_id = 0, select_id = 0;  // of the config that made it
  detail::state_view v{};
  stage at = stage::encode_bitmap;
  // The step's report (device memory): errors found on the device, r, the peel statistics.
  const step_report* report() const { return v.report; }
  std::uint64_t* step() const { return v.step; }
  float* residual() const { return v.residual; }
};

namespace detail {

// The per-shard plan and the rule::tagc table (host), uploaded by make_state.
inline std::vector<shard_plan> make_plan(const config& c, const sizes& z) {
  std::vector<shard_plan> plan(z.world);
  std::uint64_t sample = 0, tiles = 0;
  for (std::uint32_t i = 0; i < z.world; ++i) {
    const chunk_range r = summable::shard_of(z.n, z.world, i);
    plan[i].offset = r.offset;
    plan[i].select = sparsify::detail::plan_chunk(c.select, r.count);
    plan[i].sample_offset = sample;
    plan[i].tile0 = tiles;
    sample += plan[i].select.sample;
    tiles += (r.count + tie_tile - 1) / tie_tile;
  }
  return plan;
}

}  // namespace detail
}  // namespace gradcomp::tagc
