#pragma once
// Checkpoints of a sharded codec's rank state (docs/wire-format.md, "Sharded checkpoint"): the
// W per-shard sender states and the owner's state, each as a compressor checkpoint, inside one
// CRC32C-checked image.
//
//   save_checkpoint / load_checkpoint   the same world size and rank: the run continues byte
//                                       for byte.
//   restore_elastic                     the W checkpoints of a run restored into rank r' of
//                                       W' ranks. What error feedback owes is kept exactly as
//                                       sums over ranks: rank r' holds, on its own shard of W',
//                                       the sum over the saved ranks (in rank order) of their
//                                       sender residuals and velocities, 0 on its other shards;
//                                       its owner residual is the saved owners' residuals, laid
//                                       end to end, over its new shard. Thresholds restart.
//
// The payload (version 2, in core/envelope.hpp's envelope "GCSH"): size u64 | step u64 | world
// u32 | rank u32 | mode u32 | sender codec id u32 | owner codec id u32 | then W + 1 records (the
// sender states of shards 0 .. W - 1, then the owner's), each a u64 byte count and a
// compressor checkpoint (state.hpp; 0 bytes: no owner state in reduce-scatter mode).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../core/byteio.hpp"
#include "../core/envelope.hpp"
#include "../core/ids.hpp"
#include "../state.hpp"
#include "state.hpp"

namespace gradcomp::sharded {

// The CPU codec (gradcomp/sharded.hpp), whose calls the functions below make once instantiated;
// declared here so that the image format needs no backend.
template <class C>
class codec;

namespace checkpoint {
inline constexpr envelope::kind kind{ids::tag::sharded_checkpoint, 2};  // "GCSH", version 2
inline constexpr std::size_t fields_bytes = 36;  // the payload before its records
}  // namespace checkpoint

namespace detail {

template <class C>
bool has_owner(const codec<C>& c) {
  return c.get_mode() == mode::all_reduce;
}

// A parsed image: header fields and the W + 1 records.
struct image {
  std::uint32_t mode = 0;
  std::uint32_t send_id = 0, owner_id = 0, world = 0, rank = 0;
  std::uint64_t size = 0, step = 0;
  std::vector<std::span<const std::byte>> records;
};

inline result<image> parse(std::span<const std::byte> in) {
  const result<std::span<const std::byte>> body = envelope::open(checkpoint::kind, in);
  if (!body) return body.error();
  const std::byte* p = body->data();
  if (body->size() < checkpoint::fields_bytes) return status{errc::truncated, "sharded checkpoint payload shorter than its fields"};
  image v;
  envelope::load_fields(p, v.size, v.step, v.world, v.rank, v.mode, v.send_id, v.owner_id);
  if (v.world == 0 || v.rank >= v.world) return status{errc::bad_header, "sharded checkpoint rank outside its world"};
  std::size_t at = checkpoint::fields_bytes;
  const std::size_t end = body->size();
  for (std::uint64_t i = 0; i <= v.world; ++i) {
    if (end - at < 8) return status{errc::truncated, "sharded checkpoint records truncated"};
    const std::uint64_t bytes = load_le<std::uint64_t>(p + at);
    at += 8;
    if (bytes > end - at) return status{errc::truncated, "sharded checkpoint records truncated"};
    v.records.push_back(body->subspan(at, bytes));
    at += bytes;
  }
  if (at != end) return status{errc::size_mismatch, "sharded checkpoint payload longer than its records"};
  return v;
}

template <class C>
status check_owner(const codec<C>& c, const image& v) {
  if (v.mode != static_cast<std::uint32_t>(c.get_mode()) || v.send_id != c.sender().codec_id() || v.owner_id != c.owner().codec_id())
    return {errc::codec_mismatch, "sharded checkpoint made by another codec or mode"};
  return {};
}

}  // namespace detail

template <class C>
std::size_t checkpoint_bytes(const codec<C>& c, const typename codec<C>::state& st) {
  std::size_t bytes = envelope::overhead + checkpoint::fields_bytes + 8 * (st.send.size() + 1);
  for (const gradcomp::state& s : st.send) bytes += gradcomp::checkpoint_bytes(s);
  return bytes + (detail::has_owner(c) ? gradcomp::checkpoint_bytes(st.owner) : 0);
}

template <class C>
result<std::size_t> save_checkpoint(const codec<C>& c, const typename codec<C>::state& st, std::span<std::byte> out) {
  const bool owner = detail::has_owner(c);
  const std::size_t bytes = checkpoint_bytes(c, st);
  if (out.size() < bytes) return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
  const std::span<std::byte> image = out.first(bytes);
  std::byte* p = envelope::payload_of(image).data();
  envelope::store_fields(p, std::uint64_t{st.size}, st.step, st.world, st.rank, static_cast<std::uint32_t>(c.get_mode()),
                         c.sender().codec_id(), c.owner().codec_id());
  std::size_t at = checkpoint::fields_bytes;
  const auto put = [&](const gradcomp::state* s, std::uint32_t id) {
    const std::size_t n = s != nullptr ? gradcomp::checkpoint_bytes(*s) : 0;
    store_le<std::uint64_t>(p + at, n);
    at += 8;
    if (s != nullptr) (void)gradcomp::save_checkpoint(*s, id, std::span(p + at, n));
    at += n;
  };
  for (const gradcomp::state& s : st.send) put(&s, c.sender().codec_id());
  put(owner ? &st.owner : nullptr, c.owner().codec_id());
  envelope::seal(checkpoint::kind, image);
  return bytes;
}

// Restores `st` (from make_state of the same codec, size, world and rank); on error `st` is
// left as it was.
template <class C>
status load_checkpoint(const codec<C>& c, std::span<const std::byte> in, typename codec<C>::state& st) {
  const result<detail::image> v = detail::parse(in);
  if (!v) return v.error();
  if (status s = detail::check_owner(c, *v); !s) return s;
  if (v->size != st.size || v->world != st.world || v->rank != st.rank || st.send.size() != st.world)
    return {errc::size_mismatch, "sharded checkpoint of another size, world or rank"};
  typename codec<C>::state next = st;
  for (std::uint32_t j = 0; j < st.world; ++j)
    if (status s = gradcomp::load_checkpoint(v->records[j], c.sender().codec_id(), next.send[j]); !s) return s;
  if (detail::has_owner(c))
    if (status s = gradcomp::load_checkpoint(v->records[st.world], c.owner().codec_id(), next.owner); !s) return s;
  next.step = v->step;
  next.at = stage::encode_scatter;
  st = std::move(next);
  return {};
}

// Rank st.rank of st.world (a state from make_state) from the checkpoints of every rank of the
// saved run, in any order.
template <class C>
status restore_elastic(const codec<C>& c, std::span<const std::span<const std::byte>> saved, typename codec<C>::state& st) {
  if (saved.empty()) return {errc::invalid_argument, "restore_elastic needs the checkpoints of every saved rank"};
  std::vector<detail::image> ranks(saved.size());
  std::uint64_t step = 0;
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const result<detail::image> v = detail::parse(saved[i]);
    if (!v) return v.error();
    if (status s = detail::check_owner(c, *v); !s) return s;
    if (i == 0) step = v->step;
    if (v->world != saved.size() || v->size != st.size || v->step != step)
      return {errc::size_mismatch, "saved checkpoints of another size, world or step"};
    if (!ranks[v->rank].records.empty()) return {errc::invalid_argument, "saved rank appears twice"};
    ranks[v->rank] = *v;
  }
  const std::uint32_t old_world = static_cast<std::uint32_t>(saved.size());
  typename codec<C>::state next = st;
  const chunk_range mine = summable::shard_of(st.size, st.world, st.rank);
  for (gradcomp::state& s : next.send) {
    std::fill(s.residual.begin(), s.residual.end(), 0.0f);
    std::fill(s.momentum.begin(), s.momentum.end(), 0.0f);
    std::fill(s.thresholds.begin(), s.thresholds.end(), 0.0f);
  }
  gradcomp::state& own = next.send[st.rank];  // this rank's sender state of its own new shard
  for (std::uint32_t j = 0; j < old_world; ++j) {
    // One scratch state per old shard, which every saved rank's record of that shard loads into.
    const chunk_range old = summable::shard_of(st.size, old_world, j);
    gradcomp::state saved_state = c.sender().make_state(old.count);
    const std::size_t lo = std::max(old.offset, mine.offset), hi = std::min(old.offset + old.count, mine.offset + mine.count);
    for (std::uint32_t r = 0; r < old_world; ++r) {
      if (status s = gradcomp::load_checkpoint(ranks[r].records[j], c.sender().codec_id(), saved_state); !s) return s;
      // The part of old shard j that lies in this rank's new shard, added in saved rank order.
      for (std::size_t e = lo; e < hi; ++e) {
        if (!own.residual.empty()) own.residual[e - mine.offset] += saved_state.residual[e - old.offset];
        if (!own.momentum.empty()) own.momentum[e - mine.offset] += saved_state.momentum[e - old.offset];
      }
    }
  }
  if (detail::has_owner(c)) {
    std::fill(next.owner.thresholds.begin(), next.owner.thresholds.end(), 0.0f);
    for (std::uint32_t r = 0; r < old_world; ++r) {
      const chunk_range old = summable::shard_of(st.size, old_world, r);
      gradcomp::state saved_state = c.owner().make_state(old.count);
      if (status s = gradcomp::load_checkpoint(ranks[r].records[old_world], c.owner().codec_id(), saved_state); !s) return s;
      const std::size_t lo = std::max(old.offset, mine.offset), hi = std::min(old.offset + old.count, mine.offset + mine.count);
      for (std::size_t e = lo; e < hi; ++e) {
        if (!next.owner.residual.empty()) next.owner.residual[e - mine.offset] = saved_state.residual[e - old.offset];
        if (!next.owner.momentum.empty()) next.owner.momentum[e - mine.offset] = saved_state.momentum[e - old.offset];
      }
    }
  }
  next.step = step;
  next.at = stage::encode_scatter;
  st = std::move(next);
  return {};
}

}  // namespace gradcomp::sharded
