#pragma once
// Checkpoints of a local-steps synchroniser's rank state (docs/wire-format.md, "Local-steps
// checkpoint"): per fragment the anchor, the outer momentum, a received mean still waiting for
// its apply, and the path's state (the codec's error feedback) as that path's own checkpoint.
// Saved between exchanges (no phase in flight); restored into a state of the same synchroniser,
// size, world and rank, the run continues byte for byte. On any error the state is left as it was.
//
// Layout (version 1): magic u32 "GCLS" | version u16 | 0 u16 | fragments u32 | world u32 | rank
// u32 | 0 u32 | size u64 | step u64 | per fragment: syncs u64 | pending u64 (0 or 1) | anchor
// count u64 | momentum count u64 | path record bytes u64 | anchor f32 x count | momentum f32 x
// count | mean f32 x anchor count when pending | path record | then CRC32C u32 of everything
// before it. Path records: a compressor checkpoint (gather path), a sharded checkpoint (sharded
// path), step u64 | residual count u64 | residual f32 x count (summable casts).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "../core/byteio.hpp"
#include "../core/crc32c.hpp"
#include "../core/ids.hpp"
#include "../gather.hpp"
#include "../sharded.hpp"
#include "../state.hpp"
#include "../summable/values.hpp"
#include "../localsteps.hpp"

namespace gradcomp::localsteps {

namespace detail {

// --- Each path's state as bytes, and back (a fresh state of the same shape to restore into).
template <class C>
std::vector<std::byte> path_record(const gather::codec<C>& p, const gather::state& st) {
  std::vector<std::byte> out(gradcomp::checkpoint_bytes(st.compressor));
  (void)gradcomp::save_checkpoint(st.compressor, p.compressor().codec_id(), out);
  return out;
}
template <class C>
status load_path_record(const gather::codec<C>& p, std::span<const std::byte> in, gather::state& st) {
  if (status s = gradcomp::load_checkpoint(in, p.compressor().codec_id(), st.compressor); !s) return s;
  st.step = st.compressor.step;
  st.sent = false;
  return {};
}
template <class C>
std::vector<std::byte> path_record(const sharded::codec<C>& p, const typename sharded::codec<C>::state& st) {
  std::vector<std::byte> out(sharded::checkpoint_bytes(p, st));
  (void)sharded::save_checkpoint(p, st, out);
  return out;
}
template <class C>
status load_path_record(const sharded::codec<C>& p, std::span<const std::byte> in, typename sharded::codec<C>::state& st) {
  return sharded::load_checkpoint(p, in, st);
}
template <class P>
  requires summable::is_summable_v<P>
std::vector<std::byte> path_record(const P&, const summable::rank_state& st) {
  std::vector<std::byte> out(16 + 4 * st.residual.size());
  store_le<std::uint64_t>(out.data(), st.step);
  store_le<std::uint64_t>(out.data() + 8, st.residual.size());
  if (!st.residual.empty()) std::memcpy(out.data() + 16, st.residual.data(), 4 * st.residual.size());
  return out;
}
template <class P>
  requires summable::is_summable_v<P>
status load_path_record(const P&, std::span<const std::byte> in, summable::rank_state& st) {
  if (in.size() < 16 || load_le<std::uint64_t>(in.data() + 8) != st.residual.size() || in.size() != 16 + 4 * st.residual.size())
    return {errc::size_mismatch, "local-steps checkpoint: a summable record of another size"};
  st.step = load_le<std::uint64_t>(in.data());
  if (!st.residual.empty()) std::memcpy(st.residual.data(), in.data() + 16, 4 * st.residual.size());
  return {};
}

}  // namespace detail

namespace checkpoint {
inline constexpr std::uint32_t magic = ids::tag::localsteps_checkpoint;  // bytes "GCLS"
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t header_bytes = 40;
inline constexpr std::size_t fragment_bytes = 40;  // a fragment's fixed fields
}  // namespace checkpoint

// The image of `st` (no exchange in flight: every fragment between syncs).
template <class Path>
result<std::vector<std::byte>> save_checkpoint(const synchroniser<Path>& sync, const typename synchroniser<Path>::state_type& st) {
  if (st.fragments.size() != sync.get_config().fragments) return status{errc::size_mismatch, "local-steps state of another fragment count"};
  std::vector<std::byte> out(checkpoint::header_bytes);
  store_le<std::uint32_t>(out.data(), checkpoint::magic);
  store_le<std::uint16_t>(out.data() + 4, checkpoint::version);
  store_le<std::uint16_t>(out.data() + 6, 0);
  store_le<std::uint32_t>(out.data() + 8, static_cast<std::uint32_t>(st.fragments.size()));
  store_le<std::uint32_t>(out.data() + 12, st.world);
  store_le<std::uint32_t>(out.data() + 16, st.rank);
  store_le<std::uint32_t>(out.data() + 20, 0);
  store_le<std::uint64_t>(out.data() + 24, st.size);
  store_le<std::uint64_t>(out.data() + 32, st.step);
  const auto floats = [&out](const std::vector<float>& v) {
    const std::size_t at = out.size();
    out.resize(at + 4 * v.size());
    if (!v.empty()) std::memcpy(out.data() + at, v.data(), 4 * v.size());
  };
  for (const auto& fs : st.fragments) {
    if (fs.phases_done != 0) return status{errc::invalid_argument, "local-steps checkpoint: an exchange is in flight (save between syncs)"};
    const std::vector<std::byte> record = detail::path_record(sync.path(), fs.path);
    const std::size_t at = out.size();
    out.resize(at + checkpoint::fragment_bytes);
    store_le<std::uint64_t>(out.data() + at, fs.syncs);
    store_le<std::uint64_t>(out.data() + at + 8, fs.pending ? 1 : 0);
    store_le<std::uint64_t>(out.data() + at + 16, fs.anchor.size());
    store_le<std::uint64_t>(out.data() + at + 24, fs.momentum.size());
    store_le<std::uint64_t>(out.data() + at + 32, record.size());
    floats(fs.anchor);
    floats(fs.momentum);
    if (fs.pending) floats(fs.values);
    out.insert(out.end(), record.begin(), record.end());
  }
  const std::uint32_t crc = crc32c(out);
  out.resize(out.size() + 4);
  store_le<std::uint32_t>(out.data() + out.size() - 4, crc);
  return out;
}

// Restores an image into `st`, a state from make_state of the same synchroniser, size, world and
// rank. On error `st` is left as it was.
template <class Path>
status load_checkpoint(const synchroniser<Path>& sync, std::span<const std::byte> in, typename synchroniser<Path>::state_type& st) {
  const std::byte* p = in.data();
  if (in.size() < checkpoint::header_bytes + 4) return {errc::truncated, "local-steps checkpoint shorter than its header"};
  if (load_le<std::uint32_t>(p) != checkpoint::magic) return {errc::bad_magic, "not a local-steps checkpoint"};
  if (load_le<std::uint16_t>(p + 4) != checkpoint::version) return {errc::unsupported_version, "local-steps checkpoint version is not 1"};
  if (load_le<std::uint16_t>(p + 6) != 0 || load_le<std::uint32_t>(p + 20) != 0) return {errc::bad_header, "reserved field is not zero"};
  if (crc32c(in.first(in.size() - 4)) != load_le<std::uint32_t>(p + in.size() - 4))
    return {errc::checksum_mismatch, "local-steps checkpoint CRC32C differs"};
  if (load_le<std::uint32_t>(p + 8) != st.fragments.size() || load_le<std::uint32_t>(p + 12) != st.world ||
      load_le<std::uint32_t>(p + 16) != st.rank || load_le<std::uint64_t>(p + 24) != st.size)
    return {errc::size_mismatch, "local-steps checkpoint of another size, fragment count, world or rank"};
  auto next = st;
  next.step = load_le<std::uint64_t>(p + 32);
  std::size_t at = checkpoint::header_bytes;
  const std::size_t end = in.size() - 4;
  const auto floats = [&](std::vector<float>& v) {
    std::memcpy(v.data(), p + at, 4 * v.size());
    at += 4 * v.size();
  };
  for (auto& fs : next.fragments) {
    if (end - at < checkpoint::fragment_bytes) return {errc::truncated, "local-steps checkpoint truncated"};
    const std::uint64_t syncs = load_le<std::uint64_t>(p + at), pending = load_le<std::uint64_t>(p + at + 8);
    const std::uint64_t anchor = load_le<std::uint64_t>(p + at + 16), momentum = load_le<std::uint64_t>(p + at + 24);
    const std::uint64_t record = load_le<std::uint64_t>(p + at + 32);
    at += checkpoint::fragment_bytes;
    if (pending > 1) return {errc::bad_header, "local-steps checkpoint: pending is not 0 or 1"};
    if (anchor != fs.anchor.size() || momentum != fs.momentum.size())
      return {errc::size_mismatch, "local-steps checkpoint: a fragment of another size or momentum setting"};
    const std::uint64_t arrays = 4 * (anchor * (1 + pending) + momentum);
    if (arrays > end - at || record > end - at - arrays) return {errc::truncated, "local-steps checkpoint truncated"};
    floats(fs.anchor);
    floats(fs.momentum);
    if (pending) floats(fs.values);
    if (status s = detail::load_path_record(sync.path(), in.subspan(at, record), fs.path); !s) return s;
    at += record;
    fs.syncs = syncs;
    fs.pending = pending == 1;
    fs.phases_done = 0;
  }
  if (at != end) return {errc::size_mismatch, "local-steps checkpoint has trailing bytes"};
  st = std::move(next);
  return {};
}

namespace detail {
// What the gather and summable paths' error feedback owes, and the step their frames carry.
inline std::vector<float>& owed(gather::state& st) { return st.compressor.residual; }
inline std::vector<float>& owed(summable::rank_state& st) { return st.residual; }
inline void take_step(gather::state& to, const gather::state& from) { to.step = to.compressor.step = from.step; }
inline void take_step(summable::rank_state& to, const summable::rank_state& from) { to.step = from.step; }
}  // namespace detail

// Restores the images of every rank of a run (`saved`, in rank order) at another world size
// into `st`, rank st.rank of st.world (a state from make_state of the same synchroniser and
// size): the step, anchors, momenta and pending means (the same on every rank) from the first
// image; what the codec's error feedback owed is kept as a sum over the ranks: the sharded path
// by sharded::restore_elastic, the gather and summable paths by giving rank r the sum of the
// saved residuals of ranks r, r + W, r + 2W, ... (W = st.world). Every image is checked as
// load_checkpoint checks it; on error `st` is left as it was.
template <class Path>
status restore_elastic(const synchroniser<Path>& sync, std::span<const std::span<const std::byte>> saved,
                       typename synchroniser<Path>::state_type& st) {
  using state_type = typename synchroniser<Path>::state_type;
  if (saved.empty() || saved.size() > 0xffffffffu) return {errc::invalid_argument, "restore_elastic needs the checkpoints of every saved rank"};
  const auto old_world = static_cast<std::uint32_t>(saved.size());
  std::vector<state_type> old(old_world);
  const std::vector<float> zeros(st.size, 0.0f);
  for (std::uint32_t r = 0; r < old_world; ++r) {
    if (status s = sync.make_state(zeros, old_world, r, old[r]); !s) return s;
    if (status s = load_checkpoint(sync, saved[r], old[r]); !s) return s;
  }
  if (st.fragments.size() != old[0].fragments.size()) return {errc::size_mismatch, "local-steps state of another fragment count"};
  state_type next = st;
  next.step = old[0].step;
  for (std::size_t f = 0; f < next.fragments.size(); ++f) {
    auto& fs = next.fragments[f];
    const auto& first = old[0].fragments[f];
    fs.anchor = first.anchor;
    fs.momentum = first.momentum;
    fs.values = first.values;
    fs.pending = first.pending;
    fs.syncs = first.syncs;
    fs.phases_done = 0;
    if constexpr (requires { sync.path().get_mode(); }) {  // the sharded path
      std::vector<std::vector<std::byte>> records;
      std::vector<std::span<const std::byte>> views;
      for (const state_type& o : old) records.push_back(detail::path_record(sync.path(), o.fragments[f].path));
      for (const auto& rec : records) views.emplace_back(rec);
      if (status s = sharded::restore_elastic(sync.path(), views, fs.path); !s) return s;
    } else {
      detail::take_step(fs.path, first.path);
      std::vector<float>& mine = detail::owed(fs.path);
      std::fill(mine.begin(), mine.end(), 0.0f);
      for (std::uint32_t r = st.rank; r < old_world && !mine.empty(); r += st.world) {
        const std::vector<float>& theirs = detail::owed(old[r].fragments[f].path);
        if (theirs.size() != mine.size()) return {errc::size_mismatch, "local-steps checkpoint: a residual of another size"};
        for (std::size_t j = 0; j < mine.size(); ++j) mine[j] += theirs[j];
      }
    }
  }
  st = std::move(next);
  return {};
}

}  // namespace gradcomp::localsteps
