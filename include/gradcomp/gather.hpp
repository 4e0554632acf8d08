#pragma once
// The gather aggregation path as one phase, on the CPU (docs/design.md, "Aggregation paths"): any
// compressor<>'s frames of the whole buffer in a slot of fixed size, all-gathered; every rank
// checks the W slots and then decodes and adds them in rank order, so that every replica holds
// the same sum. A rank receives W - 1 payloads: for few ranks (the sharded path's bytes do not
// grow with W).
//
// A slot is the sharded path's (docs/wire-format.md, "Sharded slot") with shard field
// `whole_buffer`: the 16-byte head (tag "GCSL", sender rank, 0xffffffff, 0), the frames of the
// step, zeros up to slot_bytes = 16 + max_payload_bytes(n) rounded up to 8. Rank r compresses
// with the seed sharded::seed_for(seed, r, W), so that ranks draw independent random numbers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "compressor.hpp"
#include "sharded/flow.hpp"
#include "state.hpp"
#include "summable/phases.hpp"

namespace gradcomp::gather {

inline constexpr std::uint32_t whole_buffer = 0xffffffffu;  // the slot head's shard field

struct phase {
  const char* name = "gather";
  std::size_t slot_bytes = 0;  // a multiple of 8
  std::uint32_t world = 1;
  constexpr std::size_t send_bytes() const { return slot_bytes; }
  constexpr std::size_t receive_bytes() const { return world * slot_bytes; }
};

// One rank's state: the compressor's (residual, momentum, thresholds) and the step the frames carry.
struct state {
  std::size_t size = 0;
  std::uint32_t world = 1, rank = 0;
  std::uint64_t step = 0;
  gradcomp::state compressor;
  bool sent = false;  // encode(0) done, receive(0) due
};

template <class C>
class codec {
 public:
  static constexpr summable::aggregation aggregation_kind = summable::aggregation::gather;
  using state_type = state;

  explicit codec(const C& c) : c_(c) {}
  const C& compressor() const { return c_; }
  status validate() const { return c_.validate(); }
  std::size_t phase_count() const { return 1; }

  status make_state(std::size_t n, std::uint32_t world, std::uint32_t rank, state& st) const {
    if (status s = validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "gather state needs world >= 1 and rank < world"};
    state s;
    s.size = n;
    s.world = world;
    s.rank = rank;
    s.compressor = c_.make_state(n);
    st = std::move(s);
    return {};
  }

  // A slot holds the frames of n fp32 or bf16 values, so that senders of either type agree.
  result<phase> describe(std::size_t k, const state& st) const {
    if (status s = check(k, st); !s) return s;
    const std::size_t payload = std::max(c_.template max_payload_bytes<float>(st.size), c_.template max_payload_bytes<bf16_t>(st.size));
    return phase{"gather", sharded::slot_head_bytes + align8(payload), st.world};
  }

  // grad (n values) into this rank's slot (out: describe(0).send_bytes()).
  template <gradient_element T>
  status encode(std::size_t k, std::span<const T> grad, state& st, std::span<std::byte> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    if (st.sent) return order_error();
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    if (out.size() != p->send_bytes()) return {errc::size_mismatch, "send buffer differs from describe().send_bytes()"};
    std::size_t used = 0;
    if (st.size > 0) {
      st.compressor.step = st.step;  // the frames carry the path's step
      const result<std::size_t> w = seeded(st.rank, st.world).template compress<T>(grad, st.compressor, out.subspan(sharded::slot_head_bytes));
      if (!w) return w.error();
      used = *w;
    }
    sharded::write_slot_head(out.data(), st.rank, whole_buffer);
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(sharded::slot_head_bytes + used), out.end(), std::byte{0});
    st.sent = true;
    return {};
  }

  // in = the W slots (slot r from rank r); out = the sum of the W decoded payloads (n values).
  // Every slot is checked before anything is written: on error `out` is untouched and the step
  // does not advance.
  template <gradient_element T>
  status receive(std::size_t k, state& st, std::span<const std::byte> in, std::span<T> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    if (!st.sent) return order_error();
    if (in.size() != p->receive_bytes()) return {errc::size_mismatch, "received buffer differs from describe().receive_bytes()"};
    if (reinterpret_cast<std::uintptr_t>(in.data()) % 8 != 0) return {errc::invalid_argument, "received buffer must be 8-byte aligned"};
    if (out.size() != st.size) return {errc::size_mismatch, "output differs from the gradient's size"};
    const auto frames = [&](std::uint32_t r) -> result<std::span<const std::byte>> {
      const std::span<const std::byte> slot = in.subspan(r * p->slot_bytes, p->slot_bytes);
      const sharded::slot_walk w = sharded::walk_slot(slot.data(), slot.size(), r, whole_buffer, st.size, st.step);
      if (w.code != errc::ok) return sharded::detail::walk_status(w.code);
      const std::span<const std::byte> body = slot.subspan(sharded::slot_head_bytes);
      for (std::size_t i = w.used; i < body.size(); ++i)
        if (body[i] != std::byte{0}) return sharded::detail::walk_status(errc::bad_header);
      return body.first(w.used);
    };
    for (std::uint32_t r = 0; r < st.world; ++r) {  // every slot checked before any is decoded
      const result<std::span<const std::byte>> f = frames(r);
      if (!f) return f.error();
      if (!f->empty())
        if (status s = seeded(r, st.world).check(*f, st.size); !s) return s;
    }
    std::fill(out.begin(), out.end(), T{});
    for (std::uint32_t r = 0; r < st.world; ++r) {  // in rank order: the same sum on every rank
      const result<std::span<const std::byte>> f = frames(r);
      if (!f->empty()) (void)seeded(r, st.world).template accumulate<T>(*f, out);
    }
    st.sent = false;
    ++st.step;
    return {};
  }

 private:
  status check(std::size_t k, const state& st) const {
    if (k != 0) return {errc::invalid_argument, "the gather path has one phase: 0"};
    if (st.world == 0 || st.rank >= st.world || st.compressor.size != st.size)
      return {errc::size_mismatch, "gather state not sized by this codec's make_state"};
    return validate();
  }
  static status order_error() { return {errc::invalid_argument, "gather phases out of order: encode(0), receive(0)"}; }
  C seeded(std::uint32_t rank, std::uint32_t world) const {
    return sharded::detail::with_seed(c_, sharded::seed_for(c_.get_config().seed, rank, world));
  }

  C c_;
};

}  // namespace gradcomp::gather
