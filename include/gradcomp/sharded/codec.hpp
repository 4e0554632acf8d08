#pragma once
// The sharded aggregation path (docs/sharded.md): any gather-path compressor<> as a
// reduce-scatter or an all-reduce whose bytes per rank do not grow with the world size W.
//
//   phase 0 "scatter" (all-to-all): each rank compresses its gradient once per destination
//     shard (summable::shard_of: shard j goes to rank j) into a slot of fixed size, with its own
//     compressor state per shard (error feedback per rank, per shard). The transport moves slot
//     j of every rank to rank j (MPI_Alltoall, all_to_all_single, ncclSend/Recv pairs).
//   receive(0): the owner checks all W slots, decodes them and sums them in fp32 in rank order
//     (the same bits on every backend and every run) into its shard: a reduce-scatter ends
//     here.
//   phase 1 "gather" (all-gather; all-reduce only): the owner compresses its reduced shard again
//     with a compressor state of its own (owner-side error feedback; a sparse codec keeps the
//     top of the reduced shard) into one slot; the transport all-gathers the slots.
//   receive(1): every rank checks the W slots and decodes slot r into shard r of its output:
//     the replicas are bit-identical.
//
// A slot: a 16-byte head (tag "GCSL", sender rank, destination shard, 0), the compressor's
// frames, zeros up to slot_bytes = 16 + max_payload_bytes of the largest shard. The frames'
// steps must equal the receiver's. Per rank and step a reduce-scatter sends (W - 1) slots, an
// all-reduce 2 (W - 1): about 2 (W - 1) / W of one payload of the whole gradient, where the
// gather path sends W - 1 payloads.
//
// Randomness: the compressor's seed is mixed with the sender's rank and the shard
// (seed_for), so that ranks and shards draw independent numbers (stochastic rounding stays
// unbiased across ranks, random-k picks other positions per rank); receivers decode with the
// sender's seed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../compressor.hpp"
#include "../core/byteio.hpp"
#include "../core/ids.hpp"
#include "../core/murmur3.hpp"
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

template <class C>
class codec {
 public:
  static constexpr summable::aggregation aggregation_kind = summable::aggregation::sharded;
  static constexpr std::size_t scatter_phase = 0, gather_phase = 1;

  struct state {
    std::size_t size = 0;
    std::uint32_t world = 1, rank = 0;
    std::uint64_t step = 0;
    std::vector<gradcomp::state> send;  // W: this rank's state per destination shard
    gradcomp::state owner;              // all-reduce: the re-encoding of this rank's reduced shard
    std::vector<float> sum;             // the reduced shard, fp32 (scratch)
    stage at = stage::encode_scatter;
  };
  using state_type = state;

  explicit codec(const C& c, mode m = mode::reduce_scatter) : send_(c), owner_(c), mode_(m) {}
  codec(const C& send, const C& owner, mode m) : send_(send), owner_(owner), mode_(m) {}

  const C& sender() const { return send_; }
  const C& owner() const { return owner_; }
  mode get_mode() const { return mode_; }
  status validate() const {
    if (mode_ != mode::reduce_scatter && mode_ != mode::all_reduce) return {errc::invalid_argument, "sharded mode is reduce_scatter or all_reduce"};
    if (status s = send_.validate(); !s) return s;
    return owner_.validate();
  }
  std::size_t phase_count() const { return mode_ == mode::all_reduce ? 2 : 1; }

  // Sizes `st` for gradients of n elements on rank `rank` of `world` (once, outside the step).
  status make_state(std::size_t n, std::uint32_t world, std::uint32_t rank, state& st) const {
    if (status s = validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "sharded state needs world >= 1 and rank < world"};
    state s;
    s.size = n;
    s.world = world;
    s.rank = rank;
    for (std::uint32_t j = 0; j < world; ++j) s.send.push_back(send_.make_state(summable::shard_of(n, world, j).count));
    const std::size_t mine = summable::shard_of(n, world, rank).count;
    if (mode_ == mode::all_reduce) s.owner = owner_.make_state(mine);
    s.sum.assign(mine, 0.0f);
    st = std::move(s);
    return {};
  }

  template <gradient_element T = float>
  result<phase> describe(std::size_t k, const state& st) const {
    if (status s = check_state(st); !s) return s;
    if (k >= phase_count()) return status{errc::invalid_argument, "sharded phases: 0 (scatter) and, for all-reduce, 1 (gather)"};
    const std::size_t most = summable::shard_size(st.size, st.world);
    if (k == scatter_phase)
      return phase{"scatter", collective::all_to_all, slot_head_bytes + align8(send_.template max_payload_bytes<T>(most)), st.world};
    // The owner re-encodes its fp32 sum.
    return phase{"gather", collective::all_gather, slot_head_bytes + align8(owner_.template max_payload_bytes<float>(most)), st.world};
  }

  // Phase 0: grad (n values) into W slots (out: describe(0).send_bytes()). Phase 1: the
  // reduced shard kept by receive(0) into one slot (grad unused).
  template <gradient_element T>
  status encode(std::size_t k, std::span<const T> grad, state& st, std::span<std::byte> out) const {
    const result<phase> p = describe<T>(k, st);
    if (!p) return p.error();
    if (st.at != (k == scatter_phase ? stage::encode_scatter : stage::encode_gather)) return out_of_order();
    if (out.size() != p->send_bytes()) return {errc::size_mismatch, "send buffer differs from describe().send_bytes()"};
    if (k == scatter_phase) {
      if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
      if (!send_.get_config().allow_non_finite)
        for (const T& v : grad)
          if (!is_finite_bits(float_bits(to_float(v)))) return {errc::non_finite_value, "gradient holds NaN or inf"};
      for (std::uint32_t j = 0; j < st.world; ++j) {
        const chunk_range r = summable::shard_of(st.size, st.world, j);
        const C c = with_seed(send_, seed_for(send_.get_config().seed, st.rank, j));
        if (status s = write_slot<T>(c, grad.subspan(r.offset, r.count), st.send[j], st, j, out.subspan(j * p->slot_bytes, p->slot_bytes)); !s)
          return s;
      }
      st.at = stage::receive_scatter;
      return {};
    }
    const C c = with_seed(owner_, seed_for(owner_.get_config().seed, st.rank, st.world));
    if (status s = write_slot<float>(c, std::span<const float>(st.sum), st.owner, st, st.rank, out); !s) return s;
    st.at = stage::receive_gather;
    return {};
  }

  // receive(0): in = the W slots of this rank's shard (slot r from rank r); out = the reduced
  // shard (shard_of(n, W, rank).count values), or empty in all-reduce mode (kept for encode(1)).
  // receive(1): in = the W re-encoded shards; out = n values. Every slot is checked before
  // anything is written: on error `out` is untouched and the stage does not advance.
  template <gradient_element T>
  status receive(std::size_t k, state& st, std::span<const std::byte> in, std::span<T> out) const {
    const result<phase> p = describe<T>(k, st);
    if (!p) return p.error();
    if (st.at != (k == scatter_phase ? stage::receive_scatter : stage::receive_gather)) return out_of_order();
    if (in.size() != p->receive_bytes()) return {errc::size_mismatch, "received buffer differs from describe().receive_bytes()"};
    if (reinterpret_cast<std::uintptr_t>(in.data()) % 8 != 0) return {errc::invalid_argument, "received buffer must be 8-byte aligned"};
    const chunk_range mine = summable::shard_of(st.size, st.world, st.rank);
    if (k == scatter_phase) {
      const bool keep = mode_ == mode::all_reduce;
      if (out.size() != (keep && out.empty() ? 0 : mine.count))
        return {errc::size_mismatch, "output differs from this rank's shard (or is not empty in all-reduce mode)"};
      std::fill(st.sum.begin(), st.sum.end(), 0.0f);
      for (std::uint32_t r = 0; r < st.world; ++r) {  // in rank order: the same sum on every run
        const result<std::span<const std::byte>> frames = read_slot(in.subspan(r * p->slot_bytes, p->slot_bytes), r, st.rank, mine.count, st.step);
        if (!frames) return frames.error();
        if (frames->empty()) continue;
        const C c = with_seed(send_, seed_for(send_.get_config().seed, r, st.rank));
        if (status s = c.template accumulate<float>(*frames, std::span<float>(st.sum)); !s) return s;
      }
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = from_float<T>(st.sum[i]);
      st.at = keep ? stage::encode_gather : stage::encode_scatter;
      if (!keep) advance(st);
      return {};
    }
    if (out.size() != st.size) return {errc::size_mismatch, "output differs from the gradient's size"};
    for (int pass = 0; pass < 2; ++pass)  // every slot checked (pass 0) before any is decoded (pass 1)
      for (std::uint32_t r = 0; r < st.world; ++r) {
        const chunk_range shard = summable::shard_of(st.size, st.world, r);
        const result<std::span<const std::byte>> f = read_slot(in.subspan(r * p->slot_bytes, p->slot_bytes), r, r, shard.count, st.step);
        if (!f) return f.error();
        if (f->empty()) continue;
        const C c = with_seed(owner_, seed_for(owner_.get_config().seed, r, st.world));
        const std::span<T> part = out.subspan(shard.offset, shard.count);
        if (pass == 0) {
          if (status s = c.check(*f, part.size()); !s) return s;
        } else {
          (void)c.template decompress<T>(*f, part);
        }
      }
    st.at = stage::encode_scatter;
    advance(st);
    return {};
  }

 private:
  static status out_of_order() {
    return {errc::invalid_argument, "sharded phases out of order: encode(0), receive(0)[, encode(1), receive(1)]"};
  }

  status check_state(const state& st) const {
    if (status s = validate(); !s) return s;
    if (st.world == 0 || st.rank >= st.world || st.send.size() != st.world ||
        st.sum.size() != summable::shard_of(st.size, st.world, st.rank).count)
      return {errc::size_mismatch, "sharded state not sized by this codec's make_state"};
    return {};
  }

  static C with_seed(const C& c, std::uint32_t seed) {
    auto cfg = c.get_config();
    cfg.seed = seed;
    return C(cfg);
  }

  template <class T>
  static T from_float(float v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      return T::from_float(v);
    }
  }

  static void advance(state& st) { ++st.step; }

  // The slot of (this rank, shard): head, frames of the step, zeros.
  template <class T>
  static status write_slot(const C& c, std::span<const T> values, gradcomp::state& s, const state& st, std::uint32_t shard,
                           std::span<std::byte> slot) {
    std::size_t used = 0;
    if (!values.empty()) {
      s.step = st.step;  // the frames carry the sharded step (each inner state follows it)
      const result<std::size_t> w = c.template compress<T>(values, s, slot.subspan(slot_head_bytes));
      if (!w) return w.error();
      used = *w;
    }
    store_le<std::uint32_t>(slot.data(), ids::tag::shard_slot);
    store_le<std::uint32_t>(slot.data() + 4, st.rank);
    store_le<std::uint32_t>(slot.data() + 8, shard);
    store_le<std::uint32_t>(slot.data() + 12, 0);
    std::fill(slot.begin() + static_cast<std::ptrdiff_t>(slot_head_bytes + used), slot.end(), std::byte{0});
    return {};
  }

  // The frames of a received slot, after checking its head, that its frames cover `count`
  // elements and carry `step`, and that zeros follow them.
  static result<std::span<const std::byte>> read_slot(std::span<const std::byte> slot, std::uint32_t sender, std::uint32_t shard,
                                                      std::size_t count, std::uint64_t step) {
    if (load_le<std::uint32_t>(slot.data()) != ids::tag::shard_slot) return status{errc::bad_magic, "not a sharded slot"};
    if (load_le<std::uint32_t>(slot.data() + 4) != sender || load_le<std::uint32_t>(slot.data() + 8) != shard ||
        load_le<std::uint32_t>(slot.data() + 12) != 0)
      return status{errc::bad_header, "slot from another rank or for another shard"};
    const std::span<const std::byte> body = slot.subspan(slot_head_bytes);
    std::size_t used = 0, covered = 0;
    while (covered < count) {
      const result<frame::header> h = frame::parse_header(body.data() + used, body.size() - used);
      if (!h) return h.error();
      if (h->step != step) return status{errc::codec_mismatch, "slot holds frames of another step"};
      if (h->element_offset != covered || h->dense_count == 0 || h->dense_count > count - covered)
        return status{errc::size_mismatch, "slot frames do not cover the shard in order"};
      if (h->frame_bytes() > body.size() - used) return status{errc::truncated, "slot frames run past the slot"};
      covered += h->dense_count;
      used += h->frame_bytes();
    }
    for (std::size_t i = used; i < body.size(); ++i)
      if (body[i] != std::byte{0}) return status{errc::bad_header, "slot padding after the frames is not zero"};
    return body.first(used);
  }

  C send_, owner_;
  mode mode_;
};

}  // namespace gradcomp::sharded
