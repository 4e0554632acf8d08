#pragma once
// Gradient exchanges over MPI: the local gradient goes in, the average over all ranks comes
// out, and gradcomp decides what travels. Both of the library's aggregation paths:
//
//   summable path (summable.hpp): codecs that declare phases (summable::cast<Q>, tagc::codec).
//     Each phase's buffer goes through the MPI collective that applies its declared reduction:
//     MPI_Allreduce, or MPI_Reduce_scatter_block for a shardable phase, then the ranks
//     all-gather what they decoded.
//
//   gather path (this file, any compressor<>): compress -> MPI_Allgather of the payload sizes
//     -> MPI_Allgatherv of the payloads -> accumulate every rank's frames, rank 0 first, into
//     a zeroed sum -> divide by the world size. Every rank adds the same frames in the same
//     order, so the replicas stay bit-identical.

#include <gradcomp/gradcomp.hpp>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace mpi_example {

namespace gc = gradcomp;

[[noreturn]] inline void fail(const char* what, const gc::status& s) {
  std::fprintf(stderr, "%s: %s (%s)\n", what, gc::to_string(s.code()), s.detail());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();  // not reached
}

// What one rank puts into the collectives in a step: `buffers` is the bytes of its send
// buffers (what it hands to MPI); `ring` is what a ring algorithm makes it send on the wire
// (all-reduce 2 (W-1)/W of the buffer, reduce-scatter (W-1)/W, all-gather every block but the
// next rank's; an all-to-all, which has no ring, the W-1 slots for the other ranks), the figure
// that compares collectives of different kinds.
struct traffic {
  double buffers = 0.0, ring = 0.0;
  traffic& operator+=(const traffic& o) {
    buffers += o.buffers;
    ring += o.ring;
    return *this;
  }
};

inline traffic all_reduce_traffic(double bytes, int world) { return {bytes, 2.0 * (world - 1) / world * bytes}; }
inline traffic reduce_scatter_traffic(double bytes, int world) { return {bytes, static_cast<double>(world - 1) / world * bytes}; }
// An all-gather(v) of per-rank blocks: a ring forwards every block but the next rank's.
inline traffic all_gather_traffic(std::span<const int> block_bytes, int rank) {
  double total = 0.0;
  for (int b : block_bytes) total += b;
  const int world = static_cast<int>(block_bytes.size());
  return {static_cast<double>(block_bytes[static_cast<std::size_t>(rank)]),
          total - block_bytes[static_cast<std::size_t>((rank + 1) % world)]};
}

class exchange {
 public:
  virtual ~exchange() = default;
  virtual std::string name() const = 0;
  virtual std::string path() const = 0;
  // Writes the average over ranks of every rank's `grad` into `avg`; returns what this rank
  // put into the collectives.
  virtual traffic average(std::span<const float> grad, std::span<float> avg) = 0;
  // Exchanges of the parameters rather than the gradient (local steps): start() before the first
  // step, after_step() after every optimizer step; what this rank put into the collectives.
  virtual void start(std::span<const float> /*params*/) {}
  virtual traffic after_step(std::span<float> /*params*/) { return {}; }
  // Diagnostics only (not part of the default list, e.g. a codec with its feedback dropped).
  virtual bool diagnostic() const { return false; }
  // A codec's own figures over the run, summed over ranks by the caller (TAGC: union size and
  // peeled items); empty when there are none.
  virtual std::vector<double> counters() const { return {}; }
  // The most wire bytes per step this exchange may send (its `ring` figure), from the codec's
  // sizes; 0: no such bound is checked.
  virtual double byte_limit() const { return 0.0; }
};

// ---- Gather path.

template <class C>
class gather final : public exchange {
 public:
  gather(std::string name, const typename C::config& cfg, std::size_t n, MPI_Comm comm)
      : name_(std::move(name)), comp_(cfg), comm_(comm) {
    if (auto s = comp_.validate(); !s) fail(name_.c_str(), s);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_rank(comm_, &rank_);
    state_ = comp_.make_state(n);
    payload_.resize(comp_.template max_payload_bytes<float>(n));
    received_.resize(payload_.size() * static_cast<std::size_t>(world_));
    counts_.resize(static_cast<std::size_t>(world_));
    displs_.resize(static_cast<std::size_t>(world_));
  }
  std::string name() const override { return name_; }
  std::string path() const override { return "gather: MPI_Allgatherv"; }

  traffic average(std::span<const float> grad, std::span<float> avg) override {
    const auto sent = comp_.template compress<float>(grad, state_, payload_);
    if (!sent) fail("compress", sent.error());
    const int mine = static_cast<int>(*sent);
    MPI_Allgather(&mine, 1, MPI_INT, counts_.data(), 1, MPI_INT, comm_);
    int at = 0;
    for (int r = 0; r < world_; ++r) displs_[r] = at, at += counts_[r];
    MPI_Allgatherv(payload_.data(), mine, MPI_BYTE, received_.data(), counts_.data(), displs_.data(), MPI_BYTE, comm_);
    std::fill(avg.begin(), avg.end(), 0.0f);
    for (int r = 0; r < world_; ++r) {  // frames from the network: validated before use
      const auto frames = std::span<const std::byte>(received_).subspan(static_cast<std::size_t>(displs_[r]),
                                                                        static_cast<std::size_t>(counts_[r]));
      if (auto s = comp_.template accumulate<float>(frames, avg); !s) fail("accumulate", s);
    }
    for (float& v : avg) v /= static_cast<float>(world_);
    traffic t = all_gather_traffic(counts_, rank_);
    const std::vector<int> sizes(static_cast<std::size_t>(world_), static_cast<int>(sizeof(int)));
    t += all_gather_traffic(sizes, rank_);
    return t;
  }

 private:
  std::string name_;
  C comp_;
  MPI_Comm comm_;
  int world_ = 1, rank_ = 0;
  gc::state state_;
  std::vector<std::byte> payload_, received_;
  std::vector<int> counts_, displs_;
};

}  // namespace mpi_example
