#pragma once
// Gradient exchanges over MPI: the local gradient goes in, the average over all ranks comes
// out, and gradcomp decides what travels. Two of the library's aggregation paths:
//
//   summable casts (quantize::none, bf16, fp16): every rank encodes its gradient / world
//     with the quantizer's own encode(), MPI_Allreduce adds the codes element-wise, and
//     decode() turns the sum back into floats. fp32 uses MPI_FLOAT + MPI_SUM; the 16-bit
//     casts use a user-defined MPI_Op that adds two codes in fp32 and rounds the sum back
//     to the wire type (so every partial sum is a 16-bit value, as with NCCL's bf16 SUM).
//
//   gather path (any other compressor): compress -> MPI_Allgather of the payload sizes ->
//     MPI_Allgatherv of the payloads -> accumulate every rank's frames, rank 0 first, into
//     a zeroed sum -> divide by the world size. Every rank adds the same frames in the same
//     order, so the replicas stay bit-identical.
//
// Extension point: a summable codec with phases (a small metadata phase reduced with MAX,
// OR or a sum-safe packing, then a SUM code phase, then decode) becomes one more class
// derived from `exchange`: one MPI_Allreduce per declared phase with the phase's operation
// (MPI_MAX, MPI_BOR, MPI_SUM) on the phase's element type, or MPI_Reduce_scatter_block when
// the codec's partitioner shards the buffer, then the codec's decode. Nothing else here
// changes.

#include <gradcomp/gradcomp.hpp>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mpi_example {

namespace gc = gradcomp;

[[noreturn]] inline void fail(const char* what, const gc::status& s) {
  std::fprintf(stderr, "%s: %s (%s)\n", what, gc::to_string(s.code()), s.detail());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();  // not reached
}

class exchange {
 public:
  virtual ~exchange() = default;
  virtual std::string name() const = 0;
  virtual const char* path() const = 0;
  // Writes the average over ranks of every rank's `grad` into `avg`; returns the bytes this
  // rank contributed to the collectives (its payload, or the buffer it all-reduces).
  virtual std::size_t average(std::span<const float> grad, std::span<float> avg) = 0;
};

// ---- Summable casts.

template <class Q>
void wire_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const typename Q::code_type*>(in);
  auto* b = static_cast<typename Q::code_type*>(inout);
  const typename Q::config cfg{};
  const typename Q::meta m{};
  for (int i = 0; i < *len; ++i) b[i] = Q::encode(cfg, m, Q::decode(cfg, m, a[i]) + Q::decode(cfg, m, b[i]), 0);
}

template <class Q>
class cast_allreduce final : public exchange {
  static_assert(Q::summable && std::is_base_of_v<gc::ungrouped_quantizer, Q> && Q::meta_bytes == 0,
                "cast_allreduce needs a summable cast quantizer");
  using code = typename Q::code_type;

 public:
  cast_allreduce(std::string name, MPI_Comm comm) : name_(std::move(name)), comm_(comm) {
    MPI_Comm_size(comm_, &world_);
    if constexpr (sizeof(code) != 4) MPI_Op_create(&wire_sum<Q>, /*commute=*/1, &op_);
  }
  ~cast_allreduce() override {
    if (op_ != MPI_OP_NULL) MPI_Op_free(&op_);
  }
  std::string name() const override { return name_; }
  const char* path() const override { return "summable (MPI_Allreduce SUM)"; }

  std::size_t average(std::span<const float> grad, std::span<float> avg) override {
    const int n = static_cast<int>(grad.size());
    if constexpr (sizeof(code) == 4) {  // fp32: the plain all-reduce
      MPI_Allreduce(grad.data(), avg.data(), n, MPI_FLOAT, MPI_SUM, comm_);
      for (float& v : avg) v /= static_cast<float>(world_);
    } else {
      // Divide first (as PyTorch's fp16 hook does): the sum of averages cannot overflow fp16.
      wire_.resize(grad.size());
      const typename Q::config cfg{};
      const typename Q::meta m{};
      for (std::size_t i = 0; i < grad.size(); ++i) wire_[i] = Q::encode(cfg, m, grad[i] / static_cast<float>(world_), 0);
      MPI_Allreduce(MPI_IN_PLACE, wire_.data(), n, MPI_UINT16_T, op_, comm_);
      for (std::size_t i = 0; i < grad.size(); ++i) avg[i] = Q::decode(cfg, m, wire_[i]);
    }
    return grad.size() * sizeof(code);
  }

 private:
  std::string name_;
  MPI_Comm comm_;
  int world_ = 1;
  MPI_Op op_ = MPI_OP_NULL;
  std::vector<code> wire_;
};

// ---- Gather path.

template <class C>
class gather final : public exchange {
 public:
  gather(std::string name, const typename C::config& cfg, std::size_t n, MPI_Comm comm)
      : name_(std::move(name)), comp_(cfg), comm_(comm) {
    if (auto s = comp_.validate(); !s) fail(name_.c_str(), s);
    MPI_Comm_size(comm_, &world_);
    state_ = comp_.make_state(n);
    payload_.resize(comp_.template max_payload_bytes<float>(n));
    received_.resize(payload_.size() * static_cast<std::size_t>(world_));
    counts_.resize(static_cast<std::size_t>(world_));
    displs_.resize(static_cast<std::size_t>(world_));
  }
  std::string name() const override { return name_; }
  const char* path() const override { return "gather (MPI_Allgatherv)"; }

  std::size_t average(std::span<const float> grad, std::span<float> avg) override {
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
    return *sent + sizeof(int);
  }

 private:
  std::string name_;
  C comp_;
  MPI_Comm comm_;
  int world_ = 1;
  gc::state state_;
  std::vector<std::byte> payload_, received_;
  std::vector<int> counts_, displs_;
};

}  // namespace mpi_example
