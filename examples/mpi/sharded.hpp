#pragma once
// The sharded path over MPI (gradcomp/sharded.hpp, docs/sharded.md): any gather-path compressor<>
// as an all-reduce or a reduce-scatter whose bytes per rank do not grow with the world size W.
//
//   phase 0 (both modes): encode(0) writes W slots of describe(0).slot_bytes each, slot j holding
//     shard j of the gradient (summable::shard_of) compressed with this rank's state for shard j;
//     MPI_Alltoall of slot_bytes MPI_BYTEs per rank; receive(0) checks the W slots of this rank's
//     shard and adds them in fp32 in rank order.
//   phase 1 (all-reduce): encode(1) compresses the reduced shard again with the owner's state
//     (its own error feedback) into one slot; MPI_Allgather of that slot; receive(1) checks every
//     slot and decodes slot r into shard r. Every rank decodes the same bytes, so the replicas
//     stay bit-identical.
//   reduce-scatter: receive(0) writes this rank's reduced shard, the result a sharded trainer
//     (FSDP) keeps. A data-parallel trainer needs every shard: the ranks MPI_Allgather their fp32
//     shards (every shard padded to shard_size floats, so shard r lands at r shard_size, its
//     offset).
//
// Slots have a fixed size (the most the frames can take), so no size exchange precedes the
// collectives. The codec sums what the ranks sent; the average is the sum divided by W, as on
// the gather path (exchange.hpp).

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/sharded.hpp>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exchange.hpp"

namespace mpi_example {

// An all-to-all of `slot_bytes` per destination: the send buffer holds W slots; the rank's own
// slot stays local, the W - 1 others cross the wire (a pairwise exchange; there is no ring).
inline traffic all_to_all_traffic(double slot_bytes, int world) { return {world * slot_bytes, (world - 1) * slot_bytes}; }

template <class C>
class sharded_exchange final : public exchange {
 public:
  using codec_type = gc::sharded::codec<C>;

  // `cfg` compresses the shards each rank sends, `owner` the reduced shard an owner sends on
  // (all-reduce); the rows use one configuration for both. diagnostic: left out of the default
  // list.
  sharded_exchange(std::string name, const typename C::config& cfg, std::size_t n, gc::sharded::mode how, MPI_Comm comm)
      : sharded_exchange(std::move(name), cfg, cfg, n, how, comm) {}
  sharded_exchange(std::string name, const typename C::config& cfg, const typename C::config& owner, std::size_t n,
                   gc::sharded::mode how, MPI_Comm comm, bool diagnostic = false)
      : name_(std::move(name)), codec_(C(cfg), C(owner), how), comm_(comm), diagnostic_(diagnostic) {
    if (auto s = codec_.validate(); !s) fail(name_.c_str(), s);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_rank(comm_, &rank_);
    const auto w = static_cast<std::uint32_t>(world_), r = static_cast<std::uint32_t>(rank_);
    if (auto s = codec_.make_state(n, w, r, st_); !s) fail(name_.c_str(), s);
    std::size_t send = 0, recv = 0;
    for (std::size_t k = 0; k < codec_.phase_count(); ++k) {
      const gc::sharded::phase p = describe(k);
      send = std::max(send, p.send_bytes());
      recv = std::max(recv, p.receive_bytes());
    }
    send_.resize((send + 7) / 8);  // u64 storage: receive() wants 8-byte aligned slots
    recv_.resize((recv + 7) / 8);
    shard_size_ = gc::summable::shard_size(n, w);
    // The all-reduce's bound: 2/W of what the gather path of the same compressor sends with
    // fixed-size payloads ((W-1) max_payload_bytes(n), as over NCCL or torch), plus 128 bytes per
    // slot: the slot's 16-byte head, a frame header of its own (88 bytes), and 24 bytes of
    // rounding (a group's scale where a shard ends inside a group, one more kept value, padding
    // to 8). Each phase takes its 1/W: phase 0 of the sender's payload, phase 1 of the owner's.
    if (how == gc::sharded::mode::all_reduce) {
      const auto payload = [&](const C& c) { return static_cast<double>(c.template max_payload_bytes<float>(n)); };
      limit_ = (world_ - 1) * ((payload(codec_.sender()) + payload(codec_.owner())) / world_ + 2.0 * 128.0);
    }
    if (how == gc::sharded::mode::reduce_scatter) {
      shard_.assign(shard_size_, 0.0f);  // the last shard's tail stays 0
      gathered_.resize(shard_size_ * w);
    }
  }

  std::string name() const override { return name_; }
  std::string path() const override {
    return codec_.get_mode() == gc::sharded::mode::all_reduce ? "sharded: MPI_Alltoall+Allgather" : "sharded: Alltoall+Allgather fp32";
  }

  bool diagnostic() const override { return diagnostic_; }
  double byte_limit() const override { return limit_; }

  traffic average(std::span<const float> grad, std::span<float> avg) override {
    const gc::sharded::phase p0 = describe(0);
    if (auto s = codec_.template encode<float>(0, grad, st_, send_bytes(p0.send_bytes())); !s) fail("sharded encode(0)", s);
    MPI_Alltoall(send_.data(), slot_count(p0), MPI_BYTE, recv_.data(), slot_count(p0), MPI_BYTE, comm_);
    traffic t = all_to_all_traffic(static_cast<double>(p0.slot_bytes), world_);
    const auto got0 = received(p0.receive_bytes());
    if (codec_.get_mode() == gc::sharded::mode::reduce_scatter) {
      const std::size_t mine = gc::summable::shard_of(grad.size(), st_.world, st_.rank).count;
      if (auto s = codec_.template receive<float>(0, st_, got0, std::span<float>(shard_).first(mine)); !s) fail("sharded receive(0)", s);
      MPI_Allgather(shard_.data(), static_cast<int>(shard_size_), MPI_FLOAT, gathered_.data(), static_cast<int>(shard_size_), MPI_FLOAT,
                    comm_);
      const std::vector<int> blocks(static_cast<std::size_t>(world_), static_cast<int>(shard_size_ * sizeof(float)));
      t += all_gather_traffic(blocks, rank_);
      std::copy_n(gathered_.begin(), avg.size(), avg.begin());
    } else {
      if (auto s = codec_.template receive<float>(0, st_, got0, std::span<float>{}); !s) fail("sharded receive(0)", s);
      const gc::sharded::phase p1 = describe(1);
      if (auto s = codec_.template encode<float>(1, {}, st_, send_bytes(p1.send_bytes())); !s) fail("sharded encode(1)", s);
      MPI_Allgather(send_.data(), slot_count(p1), MPI_BYTE, recv_.data(), slot_count(p1), MPI_BYTE, comm_);
      const std::vector<int> blocks(static_cast<std::size_t>(world_), slot_count(p1));
      t += all_gather_traffic(blocks, rank_);
      if (auto s = codec_.template receive<float>(1, st_, received(p1.receive_bytes()), avg); !s) fail("sharded receive(1)", s);
    }
    for (float& v : avg) v /= static_cast<float>(world_);
    return t;
  }

 private:
  gc::sharded::phase describe(std::size_t k) const {
    const auto p = codec_.describe(k, st_);
    if (!p) fail("sharded describe", p.error());
    return *p;
  }
  static int slot_count(const gc::sharded::phase& p) { return static_cast<int>(p.slot_bytes); }
  std::span<std::byte> send_bytes(std::size_t bytes) { return std::as_writable_bytes(std::span(send_)).first(bytes); }
  std::span<const std::byte> received(std::size_t bytes) const { return std::as_bytes(std::span(recv_)).first(bytes); }

  std::string name_;
  codec_type codec_;
  MPI_Comm comm_;
  bool diagnostic_ = false;
  int world_ = 1, rank_ = 0;
  typename codec_type::state st_;
  std::vector<std::uint64_t> send_, recv_;
  std::size_t shard_size_ = 0;
  double limit_ = 0.0;
  std::vector<float> shard_, gathered_;  // reduce-scatter: this rank's reduced shard, every rank's
};

}  // namespace mpi_example
