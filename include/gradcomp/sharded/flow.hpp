#pragma once
// The sharded path's rules and the flow of its calls, written once for every backend
// (gradcomp/sharded.hpp explains the path; docs/sharded.md): the phases' shapes, the call order,
// the slot's head and the walk over its frames (GRADCOMP_HD: the host and a GPU thread run the
// same function), the per-rank seeds, and detail::flow, which runs each call over an
// executor (cpu/sharded.hpp, cuda/sharded.cuh).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/byteio.hpp"
#include "../core/frame.hpp"
#include "../core/ids.hpp"
#include "../core/murmur3.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "../summable/phases.hpp"

namespace gradcomp::sharded {

// What the transport does with a phase's buffer: send W slots and receive W slots.
enum class collective : std::uint8_t {
  all_to_all = 1,  // slot j of the send buffer goes to rank j; slot r of the receive buffer came from rank r
  all_gather = 2,  // every rank sends one slot; slot r of the receive buffer came from rank r
};

enum class mode : std::uint8_t { reduce_scatter = 1, all_reduce = 2 };

struct phase {
  const char* name = "";
  collective op = collective::all_to_all;
  std::size_t slot_bytes = 0;  // a multiple of 8
  std::uint32_t world = 1;
  // The send buffer (all_to_all: W slots; all_gather: one slot) and the receive buffer (W slots).
  constexpr std::size_t send_bytes() const { return op == collective::all_to_all ? world * slot_bytes : slot_bytes; }
  constexpr std::size_t receive_bytes() const { return world * slot_bytes; }
};

// Where a rank is within a step.
enum class stage : std::uint8_t { encode_scatter, receive_scatter, encode_gather, receive_gather };

inline constexpr std::size_t slot_head_bytes = 16;

// The seed rank `rank` uses for destination shard `shard` (shard == W: the owner's re-encoding).
inline std::uint32_t seed_for(std::uint32_t seed, std::uint32_t rank, std::uint32_t shard) {
  return murmur3_u32(shard, murmur3_u32(rank, seed));
}

// --- A slot, on the host and on the device.

GRADCOMP_HD inline void write_slot_head(std::byte* slot, std::uint32_t sender, std::uint32_t shard) {
  store_le<std::uint32_t>(slot, ids::tag::shard_slot);
  store_le<std::uint32_t>(slot + 4, sender);
  store_le<std::uint32_t>(slot + 8, shard);
  store_le<std::uint32_t>(slot + 12, 0);
}

// What a slot's frames span, or why the slot is refused.
struct slot_walk {
  errc code = errc::ok;
  std::uint64_t used = 0;  // bytes of frames after the head
};

// Checks a received slot's head (tag: bad_magic; sender, shard: bad_header) and walks its frame
// headers: each carries `step` (else codec_mismatch: a slot of another step), they cover the
// `count` elements in order (size_mismatch) and end inside the slot (truncated). The padding
// after them must be zero (padding_is_zero; bad_header), and the frames pass a full decode check.
GRADCOMP_HD inline slot_walk walk_slot(const std::byte* slot, std::uint64_t slot_bytes, std::uint32_t sender, std::uint32_t shard,
                                       std::uint64_t count, std::uint64_t step) {
  if (load_le<std::uint32_t>(slot) != ids::tag::shard_slot) return {errc::bad_magic, 0};
  if (load_le<std::uint32_t>(slot + 4) != sender || load_le<std::uint32_t>(slot + 8) != shard || load_le<std::uint32_t>(slot + 12) != 0)
    return {errc::bad_header, 0};
  const std::byte* body = slot + slot_head_bytes;
  const std::uint64_t size = slot_bytes - slot_head_bytes;
  std::uint64_t used = 0, covered = 0;
  while (covered < count) {
    const result<frame::header> h = frame::parse_header(body + used, size - used);
    if (!h) return {h.code(), 0};
    if (h->step != step) return {errc::codec_mismatch, 0};
    if (h->element_offset != covered || h->dense_count == 0 || h->dense_count > count - covered) return {errc::size_mismatch, 0};
    if (h->frame_bytes() > size - used) return {errc::truncated, 0};
    covered += h->dense_count;
    used += h->frame_bytes();
  }
  return {errc::ok, used};
}

namespace detail {

inline status walk_status(errc e) {
  switch (e) {
    case errc::ok: return {};
    case errc::bad_magic: return {errc::bad_magic, "not a sharded slot"};
    case errc::bad_header: return {errc::bad_header, "slot from another rank or for another shard, or its padding is not zero"};
    case errc::codec_mismatch: return {errc::codec_mismatch, "slot holds frames of another step"};
    case errc::size_mismatch: return {errc::size_mismatch, "slot frames do not cover the shard in order"};
    case errc::truncated: return {errc::truncated, "slot frames run past the slot"};
    default: return {e, "slot frame header malformed"};
  }
}

inline status out_of_order() {
  return {errc::invalid_argument, "sharded phases out of order: encode(0), receive(0)[, encode(1), receive(1)]"};
}

template <class C>
C with_seed(const C& c, std::uint32_t seed) {
  auto cfg = c.get_config();
  cfg.seed = seed;
  return C(cfg);
}

// The flow of every call, for any executor Ex of a backend, which supplies:
//   check_gradient<T>(c, grad), sum(st)         what the host can refuse; the reduced shard
//   write_slot<T>(c, values, st, shard, slot)   compress values with st's state for `shard`
//                                              (shard == W: the owner's), head, zeros
//   begin_sum(st), add_slot(c, slot, sender, count, st), finish_sum<T>(st, out)
//   begin_gather(st), check_slot(c, slot, sender, count, st), decode_slot<T>(c, slot, sender, count, st, out),
//   finish_gather(st)
//   advance(st)
// An executor that runs on the host returns data errors at once; a device executor returns
// what the host can see and gates every later step on the device's verdict.
template <class C>
class flow {
 public:
  flow(const C& send, const C& owner, mode m) : send_(send), owner_(owner), mode_(m) {}

  const C& sender() const { return send_; }
  const C& owner() const { return owner_; }
  mode get_mode() const { return mode_; }
  std::size_t phase_count() const { return mode_ == mode::all_reduce ? 2 : 1; }
  status validate() const {
    if (mode_ != mode::reduce_scatter && mode_ != mode::all_reduce) return {errc::invalid_argument, "sharded mode is reduce_scatter or all_reduce"};
    if (status s = send_.validate(); !s) return s;
    return owner_.validate();
  }
  status check_geometry(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    if (status s = validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "sharded state needs world >= 1 and rank < world"};
    if (summable::shard_size(n, world) > 0xffffffffu) return {errc::count_too_large, "sharded shards hold at most 2^32 - 1 elements"};
    return {};
  }

  // A slot holds the frames of the largest shard whether the senders' gradients are fp32 or
  // bf16 (their chunks, and so their frame headers, differ), so that ranks and receivers of
  // either type agree on it.
  result<phase> describe(std::size_t k, std::size_t n, std::uint32_t world) const {
    if (k >= phase_count()) return status{errc::invalid_argument, "sharded phases: 0 (scatter) and, for all-reduce, 1 (gather)"};
    const std::size_t most = summable::shard_size(n, world);
    const C& c = k == 0 ? send_ : owner_;
    const std::size_t payload = std::max(c.template max_payload_bytes<float>(most), c.template max_payload_bytes<bf16_t>(most));
    return phase{k == 0 ? "scatter" : "gather", k == 0 ? collective::all_to_all : collective::all_gather, slot_head_bytes + align8(payload),
                 world};
  }

  template <gradient_element T, class Ex, class St>
  status encode(Ex& ex, std::size_t k, std::span<const T> grad, St& st, std::span<std::byte> out) const {
    const result<phase> p = describe(k, st.size, st.world);
    if (!p) return p.error();
    if (st.at != (k == 0 ? stage::encode_scatter : stage::encode_gather)) return out_of_order();
    if (out.size() != p->send_bytes()) return {errc::size_mismatch, "send buffer differs from describe().send_bytes()"};
    if (k == 0) {
      if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
      if (status s = ex.template check_gradient<T>(send_, grad); !s) return s;
      for (std::uint32_t j = 0; j < st.world; ++j) {
        const chunk_range r = summable::shard_of(st.size, st.world, j);
        const C c = with_seed(send_, seed_for(send_.get_config().seed, st.rank, j));
        if (status s = ex.template write_slot<T>(c, grad.subspan(r.offset, r.count), st, j, out.subspan(j * p->slot_bytes, p->slot_bytes)); !s)
          return s;
      }
      st.at = stage::receive_scatter;
      return {};
    }
    const C c = with_seed(owner_, seed_for(owner_.get_config().seed, st.rank, st.world));
    if (status s = ex.template write_slot<float>(c, ex.sum(st), st, st.world, out); !s) return s;
    st.at = stage::receive_gather;
    return {};
  }

  template <gradient_element T, class Ex, class St>
  status receive(Ex& ex, std::size_t k, St& st, std::span<const std::byte> in, std::span<T> out) const {
    const result<phase> p = describe(k, st.size, st.world);
    if (!p) return p.error();
    if (st.at != (k == 0 ? stage::receive_scatter : stage::receive_gather)) return out_of_order();
    if (in.size() != p->receive_bytes()) return {errc::size_mismatch, "received buffer differs from describe().receive_bytes()"};
    if (reinterpret_cast<std::uintptr_t>(in.data()) % 8 != 0) return {errc::invalid_argument, "received buffer must be 8-byte aligned"};
    const auto slot = [&](std::uint32_t r) { return in.subspan(r * p->slot_bytes, p->slot_bytes); };
    if (k == 0) {
      const bool keep = mode_ == mode::all_reduce;
      const std::size_t mine = summable::shard_of(st.size, st.world, st.rank).count;
      if (out.size() != (keep && out.empty() ? 0 : mine))
        return {errc::size_mismatch, "output differs from this rank's shard (or is not empty in all-reduce mode)"};
      ex.begin_sum(st);
      for (std::uint32_t r = 0; r < st.world; ++r)  // in rank order: the same sum on every run
        if (status s = ex.add_slot(with_seed(send_, seed_for(send_.get_config().seed, r, st.rank)), slot(r), r, mine, st); !s) return s;
      if (status s = ex.template finish_sum<T>(st, out); !s) return s;
      st.at = keep ? stage::encode_gather : stage::encode_scatter;
      if (!keep) ex.advance(st);
      return {};
    }
    if (out.size() != st.size) return {errc::size_mismatch, "output differs from the gradient's size"};
    ex.begin_gather(st);
    for (std::uint32_t r = 0; r < st.world; ++r)  // every slot checked before any is decoded
      if (status s = ex.check_slot(with_seed(owner_, seed_for(owner_.get_config().seed, r, st.world)), slot(r), r,
                                   summable::shard_of(st.size, st.world, r).count, st);
          !s)
        return s;
    for (std::uint32_t r = 0; r < st.world; ++r) {
      const chunk_range shard = summable::shard_of(st.size, st.world, r);
      if (status s = ex.template decode_slot<T>(with_seed(owner_, seed_for(owner_.get_config().seed, r, st.world)), slot(r), r,
                                                shard.count, st, out.subspan(shard.offset, shard.count));
          !s)
        return s;
    }
    if (status s = ex.finish_gather(st); !s) return s;
    st.at = stage::encode_scatter;
    ex.advance(st);
    return {};
  }

 private:
  C send_, owner_;
  mode mode_;
};

}  // namespace detail
}  // namespace gradcomp::sharded
