#pragma once
// TAGC's multi-phase flow, written once for the device form: tagc::codec's calls as sequences
// of per-thread steps over an executor (the functors of tagc/bitmap_steps.hpp and
// tagc/sketch_steps.hpp, in memory carved by tagc/memory.hpp). cuda::tagc::codec
// (cuda/tagc.cuh) is this flow with the CUDA executor; the tests run it with host loops
// (tests/tagc/host_executor.hpp) beside the host codec (gradcomp/tagc.hpp), byte for byte.
//
// The phases (the summable path, docs/tagc.md): describe(k) gives each one's buffer.
//   0, bitmap   encode_bitmap: x = g + e, every shard's threshold, the kept-position words;
//               the transport reduces them (OR for the 1-bit bitmap, SUM for the sum-safe one)
//               and receive_bitmap checks the result and builds the union, r and the cell index.
//   1, sketch   encode_sketch: every destination shard's cells and the residual update; the
//               transport sums them (reduce or reduce-scatter) and receive_sketch peels the
//               whole sketch or this rank's shard.
//
// Call order, per rank (tagc/rules.hpp's stages; anything else is errc::invalid_argument):
//   make_state once (synchronous); then every step
//   encode_bitmap -> receive_bitmap -> encode_sketch -> receive_sketch -> finish_step.
//   download_state / upload_state (synchronous, between steps) copy to and from a host
//   tagc::state for the checkpoint calls; read_report copies the step's report.
//
// What the executor `Ex` supplies:
//   ex.map(n, f, guard)                       f(i) for i < n
//   ex.count(n, f, counters, guard)           counters[f(i).segment] += f(i).value
//   ex.sort_keys(temp, bytes, in, out, n, bits)            ascending u64 keys (stable)
//   ex.sort_pairs(temp, bytes, kin, kout, vin, vout, n, bits)  u32 pairs by key (stable)
//   ex.exclusive_sum(temp, bytes, data, n)    in place, u32
//   ex.zero(p, bytes), ex.upload(dst, src, bytes), ex.download(dst, src, bytes)
//   ex.outcome()                              the first failure of the executor itself
//   Ex::temp_bytes(sizes)                     the sorts' and scan's scratch
//
// Each call makes tagc::codec's checks of the call order, sizes and alignment, returned at
// once; then it enqueues the steps. The sizes of the steps are the bounds the host knows (the
// most items, rows, cells); what depends on the data is read by the steps from device memory
// (the report's rows, the scanned item counts), so nothing waits for the device inside a step.
//
// What differs from tagc::codec, because the host never waits for the device:
//   - a failure that depends on the data (a bad union in receive(0), a packed sketch buffer
//     smaller than the step's cells) lands in the state's report; the rest of the step does
//     nothing (no cells, no residual update, output untouched); finish_step still advances.
//   - describe(1) gives the largest sketch phase (R = max_rows); the step's own count is the
//     report's sketch_cells (packed layout), or that bound itself (padded layout).
//   - receive(1) is told whether it holds the whole sketch or this rank's shard.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "memory.hpp"

namespace gradcomp::tagc::detail {

class flow {
 public:
  static constexpr std::size_t bitmap_phase = 0, sketch_phase = 1;

  explicit flow(const config& c = {}, sketch_layout layout = sketch_layout::packed) : cfg_(c), layout_(layout) {}
  const config& get_config() const { return cfg_; }
  sketch_layout layout() const { return layout_; }
  status validate() const { return tagc::validate(cfg_); }

  // Device bytes of a rank's state (residual, thresholds, step, key, report, plan).
  result<std::size_t> state_bytes(std::size_t n, std::uint32_t world) const {
    const result<sizes> z = sizes_for(cfg_, n, world);
    if (!z) return z.error();
    state_view v;
    return carve_state(*z, nullptr, v);
  }

  // Device bytes of the workspace every call of a step uses (the same one through a step:
  // receive(0) builds the cell index that encode(1) and receive(1) read).
  template <class Ex>
  result<std::size_t> workspace_bytes(std::size_t n, std::uint32_t world) const {
    const result<sizes> z = sizes_for(cfg_, n, world);
    if (!z) return z.error();
    const result<std::size_t> temp = Ex::temp_bytes(*z);
    if (!temp) return temp.error();
    work_view w;
    std::byte* t = nullptr;
    return carve_work(*z, cfg_.max_rounds, *temp, nullptr, w, t);
  }

  // A zeroed state (step 0, key = config::seed) in `memory` (state_bytes, 256-byte aligned).
  // Synchronous (uploads the plan): once, outside the step.
  template <class Ex>
  status make_state(Ex& ex, std::span<std::byte> memory, std::size_t n, std::uint32_t world, std::uint32_t rank,
                    device_state& st) const {
    const result<sizes> z = sizes_for(cfg_, n, world);
    if (!z) return z.error();
    if (rank >= world) return {errc::invalid_argument, "TAGC state needs world >= 1 and rank < world"};
    device_state s;
    const std::size_t bytes = carve_state(*z, nullptr, s.v);
    if (memory.size() < bytes) return {errc::buffer_too_small, "TAGC state memory smaller than state_bytes()"};
    if (reinterpret_cast<std::uintptr_t>(memory.data()) % 256 != 0) return {errc::invalid_argument, "TAGC state memory must be 256-byte aligned"};
    std::vector<std::uint32_t> table(z->table_size);
    sparsify::detail::table_keys(cfg_.select, table.data());
    const std::vector<shard_plan> plan = make_plan(cfg_, *z);
    carve_state(*z, memory.data(), s.v);
    s.size = n;
    s.world = world;
    s.rank = rank;
    s.codec_id = tagc::codec_id(cfg_);
    s.select_id = select_fingerprint(cfg_);
    ex.zero(memory.data(), bytes);
    ex.upload(s.v.key, &cfg_.seed, sizeof cfg_.seed);
    ex.upload(s.v.plan, plan.data(), plan.size() * sizeof(shard_plan));
    ex.upload(s.v.table, table.data(), table.size() * 4);
    if (status e = ex.outcome(); !e) return e;
    st = s;
    return {};
  }

  result<summable::phase> describe(std::size_t k, const device_state& st) const {
    if (status s = check_state(st); !s) return s;
    if (k == bitmap_phase) return tagc::detail::bitmap_phase(cfg_, st.size, st.world);
    if (k != sketch_phase) return status{errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)"};
    return tagc::detail::sketch_phase(cfg_, st.world, max_rows(cfg_, st.size, st.world));
  }

  std::size_t max_phase_bytes(const device_state& st) const {
    if (!check_state(st)) return 0;
    return tagc::detail::max_phase_bytes(cfg_, st.size, st.world);
  }

  // Phase 0: x = g + e, the threshold search of every shard, the kept positions into `out`.
  template <class Ex>
  status encode_bitmap(Ex& ex, std::span<std::byte> workspace, device_state& st, std::span<const float> grad,
                       std::span<std::byte> out) const {
    const result<summable::phase> p =
        open_call(*this, bitmap_phase, st, stage::encode_bitmap, out, "phase buffer differs from describe().bytes()");
    if (!p) return p.error();
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    call k;
    if (status s = begin<Ex>(st, workspace, k); !s) return s;
    const context& c = k.c;
    const std::uint32_t W = st.world;
    ex.map(1, start_step{c}, {});
    ex.map(k.z.sample, draw_sample{c, grad.data()}, {});
    ex.sort_keys(k.temp, k.temp_bytes, c.w.sample_in, c.w.sample_out, k.z.sample, k.z.sample_bits);
    ex.map(W, begin_select{c}, {});
    ex.count(st.size, combine_count{c, grad.data()}, c.w.pass_count, {});
    for (std::uint32_t pass = 1;; ++pass) {
      ex.map(W, finish_pass{c}, {});
      ex.map(1, settle_stages{c}, {});
      if (pass == sparsify::detail::max_count_passes(cfg_.select)) break;
      ex.count(st.size, count_pass{c}, c.w.pass_count, guard{nullptr, c.w.flags});
    }
    const guard ranking{nullptr, c.w.flags + 1};
    for (int pass = 0; pass < 3; ++pass) {
      ex.map(std::uint64_t{W} * sparsify::detail::max_bins, zero_counters{c.w.hist}, ranking);
      ex.count(st.size, radix_hist{c, pass}, c.w.hist, ranking);
      ex.map(W, radix_pick{c, pass}, ranking);
    }
    ex.map(k.z.tiles, zero_counters{c.w.tile_ties}, ranking);
    ex.count(st.size, count_ties{c}, c.w.tile_ties, ranking);
    ex.map(W, end_select{c}, {});
    ex.map(p->count, bitmap_words{c, reinterpret_cast<std::uint32_t*>(out.data()), cfg_.bitmap == bitmap_mode::sum_safe,
                                  sketch::sum_safe_layout::make(W)},
           {});
    return advance(ex, st, stage::receive_bitmap);
  }

  // receive(0): the reduced bitmap, checked; the union per shard, r and the cell index.
  template <class Ex>
  status receive_bitmap(Ex& ex, std::span<std::byte> workspace, device_state& st, std::span<const std::byte> in) const {
    const result<summable::phase> p =
        open_call(*this, bitmap_phase, st, stage::receive_bitmap, in, "reduced buffer differs from the phase's size (not shardable)");
    if (!p) return p.error();
    call k;
    if (status s = begin<Ex>(st, workspace, k); !s) return s;
    const context& c = k.c;
    const guard g = stop(st);
    const auto* words = reinterpret_cast<const std::uint32_t*>(in.data());
    const bool sum_safe = cfg_.bitmap == bitmap_mode::sum_safe;
    const auto l = sketch::sum_safe_layout::make(st.world);
    ex.map(1, receive_start{c}, g);
    if (sum_safe) {
      ex.map(p->count, check_sums{c, words, l}, g);
      ex.map(1, settle_sums{c}, g);
    } else {
      ex.map(1, check_tail{c, words}, g);
    }
    ex.map(k.z.aligned, aligned_words{c, words, sum_safe, l}, g);
    ex.map(k.z.aligned + 1, word_popcounts{c}, g);
    ex.exclusive_sum(k.temp, k.temp_bytes, c.w.word_items, k.z.aligned + 1);
    if (cfg_.block > 1) {
      const std::uint64_t lanes = std::uint64_t{st.world} * k.z.lanes;
      ex.map(lanes + 1, zero_counters{c.w.lane_items}, g);
      ex.count(32 * k.z.aligned, lane_tally{c}, c.w.lane_items, g);
      ex.map(lanes, fullest_lane{c}, g);
    }
    ex.map(1, settle_union{c}, g);
    ex.map(3 * k.z.items, fill_slots{c}, g);
    ex.map(k.z.aligned, write_items{c}, g);
    ex.sort_pairs(k.temp, k.temp_bytes, c.w.keys_in, c.w.keys_out, c.w.vals_in, c.w.vals_out, 3 * k.z.items, k.z.slot_bits);
    ex.map(3 * k.z.items + 1, bounds{c}, g);
    return advance(ex, st, stage::encode_sketch);
  }

  // Phase 1: every destination shard's cells into `out`, then the residual keeps x minus what
  // the rank's own cells convey. Packed: out holds at least the step's cells (else the report
  // says buffer_too_small); padded: exactly describe(1).bytes().
  template <class Ex>
  status encode_sketch(Ex& ex, std::span<std::byte> workspace, device_state& st, std::span<std::byte> out) const {
    const result<summable::phase> p = open_call(*this, sketch_phase, st, stage::encode_sketch);
    if (!p) return p.error();
    if (status s = check_cells(*p, out.size(), out.data(), false); !s) return s;
    call k;
    if (status s = begin<Ex>(st, workspace, k); !s) return s;
    const context& c = k.c;
    const guard g = stop(st);
    const cell_layout l{layout_ == sketch_layout::padded, false};
    ex.map(1, check_capacity{c, l, out.size() / p->element_bytes(), errc::buffer_too_small}, g);
    const auto body = [&](auto* cells) {
      using Cell = std::remove_pointer_t<decltype(cells)>;
      ex.map(k.z.max_cells, encode_cells<Cell>{c, cells, l}, g);
      peel<Ex, Cell>(ex, c, scope{}, cells, l, g);
    };
    if (cfg_.cells == summable::wire_type::f32) {
      body(reinterpret_cast<float*>(out.data()));
    } else {
      body(reinterpret_cast<bf16_t*>(out.data()));
    }
    ex.count(k.z.aligned, update_residual{c}, c.w.tally, g);
    ex.map(1, settle_peel{c, scope{}, true}, g);
    return advance(ex, st, stage::receive_sketch);
  }

  // receive(1): the peel of the summed cells, `kind` telling whether `in` is the whole sketch
  // (out: n values) or this rank's shard of it (out: its shard_of range).
  template <class Ex>
  status receive_sketch(Ex& ex, std::span<std::byte> workspace, device_state& st, std::span<const std::byte> in,
                        summable::received kind, std::span<float> out) const {
    const result<summable::phase> p = open_call(*this, sketch_phase, st, stage::receive_sketch);
    if (!p) return p.error();
    const bool whole = kind == summable::received::whole;
    if (status s = check_cells(*p, in.size(), in.data(), !whole); !s) return s;
    if (status s = tagc::detail::check_output(st.size, st.world, st.rank, kind, out.size()); !s) return s;
    call k;
    if (status s = begin<Ex>(st, workspace, k); !s) return s;
    const context& c = k.c;
    const guard g = stop(st);
    const cell_layout l{layout_ == sketch_layout::padded, !whole};
    const scope s{whole, st.rank};
    ex.map(1, check_capacity{c, l, in.size() / p->element_bytes(), errc::size_mismatch}, g);
    if (cfg_.cells == summable::wire_type::f32) {
      peel<Ex, float>(ex, c, s, reinterpret_cast<const float*>(in.data()), l, g);
    } else {
      peel<Ex, bf16_t>(ex, c, s, reinterpret_cast<const bf16_t*>(in.data()), l, g);
    }
    ex.count(whole ? k.z.aligned : k.z.wps, output_words{c, s, out.data()}, c.w.tally, g);
    ex.map(1, settle_peel{c, s, false}, g);
    return advance(ex, st, stage::done);
  }

  template <class Ex>
  status finish_step(Ex& ex, device_state& st) const {
    context c;
    c.st = st.v;
    ex.map(1, advance_step{c}, {});
    return advance(ex, st, stage::encode_bitmap);
  }

  // Synchronous copies to and from a host tagc::state of the same size, world and rank (for
  // save_checkpoint / load_checkpoint; not for the hot path).
  template <class Ex>
  status download_state(Ex& ex, const device_state& st, state& h) const {
    if (status s = check_host(st, h); !s) return s;
    ex.download(&h.step, st.v.step, sizeof h.step);
    ex.download(&h.key, st.v.key, sizeof h.key);
    ex.download(h.residual.data(), st.v.residual, 4 * st.size);
    ex.download(h.thresholds.data(), st.v.thresholds, 4 * std::size_t{st.world});
    return ex.outcome();
  }
  template <class Ex>
  status upload_state(Ex& ex, const state& h, device_state& st) const {
    if (status s = check_host(st, h); !s) return s;
    ex.upload(st.v.step, &h.step, sizeof h.step);
    ex.upload(st.v.key, &h.key, sizeof h.key);
    ex.upload(st.v.residual, h.residual.data(), 4 * st.size);
    ex.upload(st.v.thresholds, h.thresholds.data(), 4 * std::size_t{st.world});
    if (status s = ex.outcome(); !s) return s;
    st.at = stage::encode_bitmap;
    return {};
  }

  // The step's report, copied to the host (synchronous).
  template <class Ex>
  result<step_report> read_report(Ex& ex, const device_state& st) const {
    if (status s = check_state(st); !s) return s;
    step_report r;
    ex.download(&r, st.v.report, sizeof r);
    if (status s = ex.outcome(); !s) return s;
    return r;
  }

 private:
  struct call {
    sizes z;
    context c;
    std::byte* temp = nullptr;
    std::size_t temp_bytes = 0;
  };

  static guard stop(const device_state& st) { return {reinterpret_cast<const std::uint32_t*>(st.v.report), nullptr}; }

  status check_state(const device_state& st) const {
    if (status s = validate(); !s) return s;
    if (status s = tagc::detail::check_world(st.world, st.rank); !s) return s;
    if (st.v.report == nullptr || st.v.residual == nullptr) return {errc::invalid_argument, "TAGC device state not made by make_state"};
    if (st.codec_id != tagc::codec_id(cfg_) || st.select_id != select_fingerprint(cfg_))
      return {errc::codec_mismatch, "TAGC device state made by a codec of another config"};
    return {};
  }

  // A host state to copy to or from `st`: of the same size, world and rank.
  status check_host(const device_state& st, const state& h) const {
    if (status s = check_state(st); !s) return s;
    if (h.size != st.size || h.world != st.world || h.rank != st.rank || h.residual.size() != st.size ||
        h.thresholds.size() != st.world)
      return {errc::size_mismatch, "host TAGC state differs from the device state's size, world or rank"};
    return {};
  }

  // A sketch buffer: whole cells, aligned; padded sizes are known here.
  status check_cells(const summable::phase& p, std::size_t bytes, const void* data, bool shard) const {
    if (bytes % p.element_bytes() != 0) return {errc::size_mismatch, "sketch buffer is not a whole number of cells"};
    if (status s = summable::check_alignment(p, data); !s) return s;
    if (layout_ == sketch_layout::padded && bytes != (shard ? p.shard_bytes() : p.bytes()))
      return {errc::size_mismatch, "padded sketch buffer differs from describe(1) (whole) or its shard"};
    return {};
  }

  template <class Ex>
  status begin(const device_state& st, std::span<std::byte> workspace, call& k) const {
    const result<sizes> z = sizes_for(cfg_, st.size, st.world);
    if (!z) return z.error();
    const result<std::size_t> temp = Ex::temp_bytes(*z);
    if (!temp) return temp.error();
    work_view w;
    std::byte* t = nullptr;
    if (reinterpret_cast<std::uintptr_t>(workspace.data()) % 256 != 0)
      return {errc::invalid_argument, "TAGC workspace must be 256-byte aligned"};
    if (workspace.size() < carve_work(*z, cfg_.max_rounds, *temp, nullptr, w, t))
      return {errc::buffer_too_small, "TAGC workspace smaller than workspace_bytes()"};
    carve_work(*z, cfg_.max_rounds, *temp, workspace.data(), w, t);
    k.z = *z;
    k.temp = t;
    k.temp_bytes = *temp;
    context& c = k.c;
    c.n = z->n;
    c.shard_size = z->shard_size > 0 ? z->shard_size : 1;
    c.inv_shard = 1.0 / static_cast<double>(c.shard_size);
    c.wps = z->wps;
    c.aligned = z->aligned;
    c.items = z->items;
    c.max_items = max_items(cfg_, z->n, z->world);
    c.sample = z->sample;
    c.tiles = z->tiles;
    c.world = st.world;
    c.rank = st.rank;
    c.block = cfg_.block;
    c.lanes = static_cast<std::uint32_t>(z->lanes);
    c.max_rows = z->max_rows;
    c.max_rounds = cfg_.max_rounds;
    c.cfg = cfg_;
    c.search = {cfg_.select.estimate, cfg_.select.density, cfg_.select.max_tries, {st.v.table, z->table_size}};
    c.st = st.v;
    c.w = w;
    return {};
  }

  template <class Ex, class Cell>
  void peel(Ex& ex, const context& c, const scope& s, const Cell* cells, const cell_layout& l, const guard& g) const {
    const std::uint64_t most = std::max<std::uint64_t>(c.items, c.max_rounds);
    const std::uint64_t cells_max = std::uint64_t{c.world} * c.max_rows * c.block;
    ex.map(most, peel_reset{c}, g);
    ex.map(cells_max, peel_init<Cell>{c, s, cells, l}, g);
    for (std::uint32_t round = 0; round < c.max_rounds; ++round) {
      ex.map(c.items, choose{c, s, round}, guard{g.stop, round > 0 ? c.w.progress + round - 1 : nullptr});
      ex.map(cells_max, subtract{c, s, round}, guard{g.stop, c.w.progress + round});
    }
  }

  template <class Ex>
  static status advance(Ex& ex, device_state& st, stage next) {
    if (status s = ex.outcome(); !s) return s;
    st.at = next;
    return {};
  }

  config cfg_{};
  sketch_layout layout_ = sketch_layout::packed;
};

}  // namespace gradcomp::tagc::detail
