#pragma once
// The summable path over MPI: any codec with phases (summable/phases.hpp) -- summable::cast<Q>
// and TAGC-2's tagc::codec here -- driven phase by phase. For each phase the codec says the
// element type, the reduction and the count; this file picks the MPI datatype and operation:
//
//   u32 + bitwise or   MPI_UINT32_T, MPI_BOR      (TAGC's 1-bit bitmap)
//   u32 + sum          MPI_UINT32_T, MPI_SUM      (TAGC's sum-safe bitmap)
//   f32 + sum          MPI_FLOAT, MPI_SUM
//   bf16 / f16 + sum   MPI_UINT16_T and a user-defined MPI_Op: MPI has no 16-bit floats, so the
//                      op decodes two codes, adds them in fp32 and rounds the sum back (every
//                      partial sum is a 16-bit value, as with NCCL's bf16 sum)
//
// and the collective:
//
//   route::all_reduce      MPI_Allreduce of every phase; the codec decodes the whole buffer.
//   route::reduce_scatter  MPI_Allreduce of the phases that are not shardable (TAGC's bitmap),
//                          MPI_Reduce_scatter_block of the shardable ones (TAGC's sketch, a
//                          cast's values): rank r receives and decodes only shard r; then the
//                          ranks MPI_Allgatherv what they decoded. TAGC's decoded shard is zero
//                          off the union of kept positions, which every rank knows after phase
//                          0, so the all-gather carries only the values at the union's
//                          positions (no indices, and no size exchange: the counts follow from
//                          the union).
//
// Gradients are divided by the world size before they are encoded (as PyTorch's compression
// hooks do): the codec then sums averages, and its error-feedback residuals are in units of the
// averaged gradient, so their sum over ranks is what the model is still owed.

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

template <class Q>
void wire_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const typename Q::code_type*>(in);
  auto* b = static_cast<typename Q::code_type*>(inout);
  const typename Q::config cfg{};
  const typename Q::meta m{};
  for (int i = 0; i < *len; ++i) b[i] = Q::encode(cfg, m, Q::decode(cfg, m, a[i]) + Q::decode(cfg, m, b[i]), 0);
}

// The MPI datatype and operation of a phase.
class wire_ops {
 public:
  wire_ops() {
    MPI_Op_create(&wire_sum<gc::quantize::bf16>, /*commute=*/1, &bf16_sum_);
    MPI_Op_create(&wire_sum<gc::quantize::fp16>, /*commute=*/1, &f16_sum_);
  }
  ~wire_ops() {
    MPI_Op_free(&bf16_sum_);
    MPI_Op_free(&f16_sum_);
  }
  wire_ops(const wire_ops&) = delete;
  wire_ops& operator=(const wire_ops&) = delete;

  static MPI_Datatype type(gc::summable::wire_type t) {
    using gc::summable::wire_type;
    return t == wire_type::u32 ? MPI_UINT32_T : t == wire_type::f32 ? MPI_FLOAT : MPI_UINT16_T;
  }
  MPI_Op op(const gc::summable::phase& p) const {
    using gc::summable::reduction;
    using gc::summable::wire_type;
    const bool half = p.type == wire_type::bf16 || p.type == wire_type::f16;
    if (p.op == reduction::bitwise_or && p.type == wire_type::u32) return MPI_BOR;
    if (p.op == reduction::max && !half) return MPI_MAX;
    if (p.op == reduction::sum) return p.type == wire_type::bf16 ? bf16_sum_ : p.type == wire_type::f16 ? f16_sum_ : MPI_SUM;
    fail("wire_ops", {gc::errc::invalid_argument, "no MPI operation for this phase's reduction and type"});
  }

 private:
  MPI_Op bf16_sum_ = MPI_OP_NULL, f16_sum_ = MPI_OP_NULL;
};

enum class route { all_reduce, reduce_scatter };

template <class C>
class summable_exchange final : public exchange {
  static_assert(gc::summable::summable_codec<C>, "summable_exchange needs a codec with phases");

 public:
  using state_type = typename C::state_type;

  // drop_feedback: zero the residuals after every step (a diagnostic: the codec without error
  // feedback, for the test's margin).
  summable_exchange(std::string name, C codec, std::size_t n, route how, const wire_ops& ops, MPI_Comm comm,
                    bool drop_feedback = false)
      : name_(std::move(name)), codec_(std::move(codec)), how_(how), ops_(ops), comm_(comm), drop_(drop_feedback) {
    if (auto s = codec_.validate(); !s) fail(name_.c_str(), s);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_rank(comm_, &rank_);
    const auto w = static_cast<std::uint32_t>(world_), r = static_cast<std::uint32_t>(rank_);
    std::size_t most = 0;
    if constexpr (requires { codec_.max_phase_bytes(st_); }) {
      if (auto s = codec_.make_state(n, w, r, st_); !s) fail(name_.c_str(), s);
      most = codec_.max_phase_bytes(st_);
    } else {
      st_ = codec_.make_state(n, w, r);
      for (std::size_t k = 0; k < codec_.phase_count(); ++k) most = std::max(most, describe(k).bytes());
    }
    send_.resize((most + 7) / 8);  // u64 storage: aligned for every element type
    recv_.resize((most + 7) / 8);
    scaled_.resize(n);
    mine_ = gc::summable::shard_of(n, w, r);
    shard_.resize(mine_.count);
    gathered_.resize(n);
    counts_.resize(static_cast<std::size_t>(world_));
    displs_.resize(static_cast<std::size_t>(world_));
  }

  std::string name() const override { return name_; }
  std::string path() const override {
    return how_ == route::all_reduce ? "summable: MPI_Allreduce" : "summable: Reduce_scatter+Allgatherv";
  }
  bool diagnostic() const override { return drop_; }
  std::vector<double> counters() const override {
    if constexpr (requires { st_.stats; }) {
      return {union_items_, items_, peeled_};
    } else {
      return {};
    }
  }

  traffic average(std::span<const float> grad, std::span<float> avg) override {
    const float inv = 1.0f / static_cast<float>(world_);
    for (std::size_t j = 0; j < grad.size(); ++j) scaled_[j] = grad[j] * inv;
    traffic t;
    bool scattered = false;
    for (std::size_t k = 0; k < codec_.phase_count(); ++k) {
      const gc::summable::phase p = describe(k);
      const bool last = k + 1 == codec_.phase_count();
      const auto send = std::as_writable_bytes(std::span(send_)).first(p.bytes());
      if (auto s = codec_.encode(k, scaled_, st_, send); !s) fail("encode", s);
      const MPI_Datatype type = wire_ops::type(p.type);
      scattered = how_ == route::reduce_scatter && p.shardable;
      if (scattered) {
        MPI_Reduce_scatter_block(send.data(), recv_.data(), static_cast<int>(p.shard_count()), type, ops_.op(p), comm_);
        t += reduce_scatter_traffic(static_cast<double>(p.bytes()), world_);
      } else {
        MPI_Allreduce(send.data(), recv_.data(), static_cast<int>(p.count), type, ops_.op(p), comm_);
        t += all_reduce_traffic(static_cast<double>(p.bytes()), world_);
      }
      const auto got = std::as_bytes(std::span(recv_)).first(scattered ? p.shard_bytes() : p.bytes());
      const std::span<float> out = !last ? std::span<float>{} : scattered ? std::span<float>(shard_) : avg;
      if (auto s = codec_.receive(k, st_, got, out); !s) fail("receive", s);
    }
    if (scattered) t += gather_shards(avg);
    count(avg);
    codec_.finish_step(st_);
    if constexpr (requires { st_.residual; })
      if (drop_) std::fill(st_.residual.begin(), st_.residual.end(), 0.0f);
    return t;
  }

 private:
  gc::summable::phase describe(std::size_t k) const {
    const auto p = codec_.describe(k, st_);
    if (!p) fail("describe", p.error());
    return *p;
  }

  // Whether position j can be non-zero after the decode: TAGC's union, everything for a cast.
  bool carried(std::size_t j) const {
    if constexpr (requires { st_.union_bits; }) {
      return (st_.union_bits[j / 32] >> (j % 32)) & 1u;
    } else {
      (void)j;
      return true;
    }
  }

  // Every rank's decoded shard, at the carried positions only, into avg (zero elsewhere).
  traffic gather_shards(std::span<float> avg) {
    const auto w = static_cast<std::uint32_t>(world_);
    int at = 0;
    for (std::uint32_t i = 0; i < w; ++i) {
      const gc::chunk_range r = gc::summable::shard_of(avg.size(), w, i);
      int c = 0;
      for (std::size_t j = r.offset; j < r.offset + r.count; ++j) c += carried(j) ? 1 : 0;
      counts_[i] = c;
      displs_[i] = at;
      at += c;
    }
    std::size_t m = static_cast<std::size_t>(displs_[static_cast<std::size_t>(rank_)]);
    for (std::size_t j = 0; j < mine_.count; ++j)
      if (carried(mine_.offset + j)) gathered_[m++] = shard_[j];
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered_.data(), counts_.data(), displs_.data(), MPI_FLOAT, comm_);
    std::fill(avg.begin(), avg.end(), 0.0f);
    m = 0;
    for (std::size_t j = 0; j < avg.size(); ++j)
      if (carried(j)) avg[j] = gathered_[m++];
    std::vector<int> bytes(counts_);
    for (int& b : bytes) b *= static_cast<int>(sizeof(float));
    return all_gather_traffic(bytes, rank_);
  }

  void count(std::span<const float> avg) {
    if constexpr (requires { st_.stats; }) {
      for (std::size_t j = 0; j < avg.size(); ++j) union_items_ += carried(j) ? 1.0 : 0.0;
      items_ += st_.stats.items;  // this rank's decode: its shard, or every shard (all-reduce)
      peeled_ += st_.stats.peeled;
    }
  }

  std::string name_;
  C codec_;
  route how_;
  const wire_ops& ops_;
  MPI_Comm comm_;
  bool drop_;
  int world_ = 1, rank_ = 0;
  state_type st_{};
  std::vector<std::uint64_t> send_, recv_;
  std::vector<float> scaled_, shard_, gathered_;
  gc::chunk_range mine_{};
  std::vector<int> counts_, displs_;
  double union_items_ = 0.0, items_ = 0.0, peeled_ = 0.0;
};

}  // namespace mpi_example
