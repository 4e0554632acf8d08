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
// frames of the step, zeros up to slot_bytes = 16 + max_payload_bytes of the largest shard
// (docs/wire-format.md, "Sharded slot"). The flow of each call is written once
// (sharded/flow.hpp) over an executor: the CPU's (cpu/sharded.hpp, this codec) and the GPU's
// (cuda/sharded.cuh, cuda::sharded::codec). This header is the path on the CPU: the codec, its
// state (sharded/state.hpp) and its checkpoints (sharded/checkpoint.hpp).
//
// Randomness: the compressor's seed is mixed with the sender's rank and the shard
// (seed_for), so that ranks and shards draw independent numbers (stochastic rounding stays
// unbiased across ranks, random-k picks other positions per rank); receivers decode with the
// sender's seed.

#include <cstddef>
#include <cstdint>
#include <span>

#include "cpu/sharded.hpp"
#include "sharded/checkpoint.hpp"
#include "sharded/flow.hpp"
#include "sharded/front.hpp"
#include "sharded/state.hpp"

namespace gradcomp::sharded {

// The sharded path on the CPU. State and buffers are host memory.
template <class C>
class codec : public detail::front<C> {
  using front = detail::front<C>;

 public:
  using state = sharded::state;
  using state_type = state;
  explicit codec(const C& c, mode m = mode::reduce_scatter) : front(c, m) {}
  codec(const C& send, const C& owner, mode m) : front(send, owner, m) {}
  using front::owner;
  using front::sender;
  using front::get_mode;

  // Sizes `st` for gradients of n elements on rank `rank` of `world` (once, outside the step).
  status make_state(std::size_t n, std::uint32_t world, std::uint32_t rank, state& st) const {
    if (status s = this->f_.check_geometry(n, world, rank); !s) return s;
    state s;
    s.size = n;
    s.world = world;
    s.rank = rank;
    for (std::uint32_t j = 0; j < world; ++j) s.send.push_back(sender().make_state(summable::shard_of(n, world, j).count));
    const std::size_t mine = summable::shard_of(n, world, rank).count;
    if (get_mode() == mode::all_reduce) s.owner = owner().make_state(mine);
    // The states compress one at a time, so they share the largest workspace: W of them each
    // holding one would grow a rank's memory with the world size.
    const auto share = [&s](gradcomp::state& x) {
      if (x.workspace.size() > s.workspace.size()) s.workspace.swap(x.workspace);
      x.workspace = std::vector<std::byte>();
    };
    for (gradcomp::state& x : s.send) share(x);
    share(s.owner);
    s.sum.assign(mine, 0.0f);
    st = std::move(s);
    return {};
  }

  // Phase 0: grad (n values) into W slots (out: describe(0).send_bytes()). Phase 1: the
  // reduced shard kept by receive(0) into one slot (grad unused).
  template <gradient_element T>
  status encode(std::size_t k, std::span<const T> grad, state& st, std::span<std::byte> out) const {
    if (status s = this->check_state(st); !s) return s;
    cpu::detail::sharded_executor ex;
    return this->f_.template encode<T>(ex, k, grad, st, out);
  }

  // receive(0): in = the W slots of this rank's shard (slot r from rank r); out = the reduced
  // shard (shard_of(n, W, rank).count values), or empty in all-reduce mode (kept for encode(1)).
  // receive(1): in = the W re-encoded shards; out = n values. Every slot is checked before
  // anything is written: on error `out` is untouched and the stage does not advance.
  template <gradient_element T>
  status receive(std::size_t k, state& st, std::span<const std::byte> in, std::span<T> out) const {
    if (status s = this->check_state(st); !s) return s;
    cpu::detail::sharded_executor ex;
    return this->f_.template receive<T>(ex, k, st, in, out);
  }
};

}  // namespace gradcomp::sharded
