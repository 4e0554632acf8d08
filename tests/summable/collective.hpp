#pragma once
// An in-process stand-in for a transport: W ranks' phase buffers reduced element by element as
// MPI or NCCL would (integers wrap, OR, MAX; floats added in rank order, bf16 and f16 partial
// sums rounded to the type after every addition, as a ring does), handed back whole
// (all-reduce) or as each rank's shard (reduce-scatter). And a driver that runs one step of
// any summable codec on W simulated ranks.

#include <gradcomp/summable/phases.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <gradcomp/core/numeric.hpp>

namespace gradcomp::test {

namespace sm = gradcomp::summable;
using bytes = std::vector<std::byte>;

enum class collective { all_reduce, reduce_scatter };

template <class T>
T load_at(const bytes& b, std::size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store_at(bytes& b, std::size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

inline bytes reduce_all(const sm::phase& p, const std::vector<bytes>& sends) {
  bytes out = sends.at(0);
  for (std::size_t r = 1; r < sends.size(); ++r) {
    for (std::size_t i = 0; i < p.count; ++i) {
      switch (p.type) {
        case sm::wire_type::u32: {
          const auto a = load_at<std::uint32_t>(out, i), b = load_at<std::uint32_t>(sends[r], i);
          store_at<std::uint32_t>(out, i, p.op == sm::reduction::sum ? a + b : p.op == sm::reduction::max ? std::max(a, b) : a | b);
          break;
        }
        case sm::wire_type::f32: store_at<float>(out, i, load_at<float>(out, i) + load_at<float>(sends[r], i)); break;
        case sm::wire_type::bf16: {
          const float s = load_at<bf16_t>(out, i).to_float() + load_at<bf16_t>(sends[r], i).to_float();
          store_at<bf16_t>(out, i, bf16_t::from_float(s));
          break;
        }
        case sm::wire_type::f16: {
          const float s = load_at<fp16_t>(out, i).to_float() + load_at<fp16_t>(sends[r], i).to_float();
          store_at<fp16_t>(out, i, fp16_t::from_float(s));
          break;
        }
      }
    }
  }
  return out;
}

// What rank `rank` receives of the reduced buffer.
inline bytes received_by(const sm::phase& p, const bytes& whole, std::uint32_t rank, collective how) {
  if (how == collective::all_reduce || !p.shardable) return whole;
  const auto first = whole.begin() + static_cast<std::ptrdiff_t>(rank * p.shard_bytes());
  return bytes(first, first + static_cast<std::ptrdiff_t>(p.shard_bytes()));
}

// One step of W ranks: each phase described (the ranks must agree), encoded, reduced and
// received; the last phase's values land in outs[r] (the whole buffer with all-reduce, the
// rank's shard with reduce-scatter). `sent`, when given, receives every rank's phase buffers.
template <class C>
status run_ranks(const C& codec, std::vector<typename C::state_type>& st, const std::vector<std::vector<float>>& grads,
                 collective how, std::vector<std::vector<float>>& outs, std::vector<std::vector<bytes>>* sent = nullptr) {
  const auto world = static_cast<std::uint32_t>(st.size());
  outs.assign(world, {});
  if (sent) sent->assign(codec.phase_count(), std::vector<bytes>(world));
  for (std::size_t k = 0; k < codec.phase_count(); ++k) {
    const result<sm::phase> p = codec.describe(k, st[0]);
    if (!p) return p.error();
    std::vector<bytes> sends(world, bytes(p->bytes()));
    for (std::uint32_t r = 0; r < world; ++r) {
      const result<sm::phase> q = codec.describe(k, st[r]);
      if (!q || q->count != p->count) return {errc::size_mismatch, "ranks disagree on a phase"};
      if (status s = codec.encode(k, grads[r], st[r], sends[r]); !s) return s;
      if (sent) (*sent)[k][r] = sends[r];
    }
    const bytes whole = reduce_all(*p, sends);
    for (std::uint32_t r = 0; r < world; ++r) {
      const bytes got = received_by(*p, whole, r, how);
      const bool last = k + 1 == codec.phase_count();
      if (last) {
        const std::size_t n = st[r].size;
        outs[r].assign(got.size() == p->bytes() ? n : sm::shard_of(n, world, r).count, -9.0f);
      }
      if (status s = codec.receive(k, st[r], got, last ? std::span<float>(outs[r]) : std::span<float>{}); !s) return s;
    }
  }
  for (auto& s : st) codec.finish_step(s);
  return {};
}

}  // namespace gradcomp::test
