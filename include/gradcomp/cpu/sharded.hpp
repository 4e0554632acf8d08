#pragma once
// The CPU executor of the sharded path's flow (sharded/flow.hpp): the state in host memory
// (sharded/state.hpp), each slot compressed and decoded by the compress flow (engine/flow.hpp)
// over the CPU's executor, data errors returned at once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "../engine/flow.hpp"
#include "../sharded/flow.hpp"
#include "../sharded/state.hpp"
#include "executor.hpp"

namespace gradcomp::cpu::detail {

struct sharded_executor {
  template <class T, class C>
  status check_gradient(const C& c, std::span<const T> grad) const {
    if (!c.get_config().allow_non_finite)
      for (const T& v : grad)
        if (!is_finite_bits(float_bits(to_float(v)))) return {errc::non_finite_value, "gradient holds NaN or inf"};
    return {};
  }

  static std::span<const float> sum(const sharded::state& st) { return st.sum; }

  // The slot of (this rank, shard): head, the frames of the step, zeros.
  template <class T, class C>
  status write_slot(const C& c, std::span<const T> values, sharded::state& st, std::uint32_t shard, std::span<std::byte> slot) const {
    std::size_t used = 0;
    if (!values.empty()) {
      gradcomp::state& s = shard < st.world ? st.send[shard] : st.owner;
      s.step = st.step;  // the frames carry the sharded step
      s.workspace.swap(st.workspace);
      executor ex;
      const result<std::size_t> w = engine::detail::compress<T>(c, ex, values, s, slot.subspan(sharded::slot_head_bytes));
      s.workspace.swap(st.workspace);
      if (!w) return w.error();
      used = *w;
    }
    sharded::write_slot_head(slot.data(), st.rank, shard < st.world ? shard : st.rank);
    std::fill(slot.begin() + static_cast<std::ptrdiff_t>(sharded::slot_head_bytes + used), slot.end(), std::byte{0});
    return {};
  }

  void begin_sum(sharded::state& st) const { std::fill(st.sum.begin(), st.sum.end(), 0.0f); }

  template <class C>
  status add_slot(const C& c, std::span<const std::byte> slot, std::uint32_t sender, std::size_t count, sharded::state& st) const {
    const result<std::span<const std::byte>> frames = read_slot(slot, sender, st.rank, count, st.step);
    if (!frames) return frames.error();
    if (frames->empty()) return {};
    executor ex;
    return engine::detail::decode<float>(c, ex, *frames, std::span<float>(st.sum), true);
  }

  template <class T>
  status finish_sum(const sharded::state& st, std::span<T> out) const {
    for (std::size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, float>) {
        out[i] = st.sum[i];
      } else {
        out[i] = T::from_float(st.sum[i]);
      }
    }
    return {};
  }

  void begin_gather(const sharded::state&) const {}

  template <class C>
  status check_slot(const C& c, std::span<const std::byte> slot, std::uint32_t owner, std::size_t count, const sharded::state& st) const {
    const result<std::span<const std::byte>> frames = read_slot(slot, owner, owner, count, st.step);
    if (!frames) return frames.error();
    if (frames->empty()) return {};
    executor ex;
    return engine::detail::check(c, ex, *frames, count);
  }

  template <class T, class C>
  status decode_slot(const C& c, std::span<const std::byte> slot, std::uint32_t owner, std::size_t count, const sharded::state& st,
                     std::span<T> out) const {
    const result<std::span<const std::byte>> frames = read_slot(slot, owner, owner, count, st.step);
    if (!frames) return frames.error();  // (checked by check_slot: not reached)
    if (frames->empty()) return {};
    executor ex;
    return engine::detail::decode<T>(c, ex, *frames, out, false);
  }

  status finish_gather(const sharded::state&) const { return {}; }
  void advance(sharded::state& st) const { ++st.step; }

 private:
  // The frames of a received slot (sharded::walk_slot), with zeros after them.
  static result<std::span<const std::byte>> read_slot(std::span<const std::byte> slot, std::uint32_t sender, std::uint32_t shard,
                                                      std::size_t count, std::uint64_t step) {
    const sharded::slot_walk w = sharded::walk_slot(slot.data(), slot.size(), sender, shard, count, step);
    if (w.code != errc::ok) return sharded::detail::walk_status(w.code);
    const std::span<const std::byte> body = slot.subspan(sharded::slot_head_bytes);
    for (std::size_t i = w.used; i < body.size(); ++i)
      if (body[i] != std::byte{0}) return sharded::detail::walk_status(errc::bad_header);
    return body.first(w.used);
  }
};

}  // namespace gradcomp::cpu::detail
