#pragma once
// Local steps over MPI (DiLoCo; gradcomp::localsteps::synchroniser): every rank takes its inner
// SGD steps on its own gradient, and every H steps the synchroniser sends the parameters'
// pseudo-gradient (anchor - parameters) / W through a codec, here int4 with error feedback on
// the sharded path: MPI_Alltoall of fixed-size slots, the owner's sum re-encoded, MPI_Allgather.
// The mean is applied to the anchor by the outer step and becomes every rank's parameters.

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/localsteps.hpp>
#include <mpi.h>

#include <string>
#include <vector>

#include "exchange.hpp"

namespace mpi_example {

template <class Path>
class local_steps final : public exchange {
 public:
  local_steps(std::string name, const gc::localsteps::config& cfg, const Path& path, MPI_Comm comm)
      : name_(std::move(name)), sync_(cfg, path), comm_(comm) {
    if (auto s = sync_.validate(); !s) fail(name_.c_str(), s);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_rank(comm_, &rank_);
  }

  std::string name() const override { return name_; }
  std::string path() const override {
    return "local steps H=" + std::to_string(sync_.get_config().period) + ": Alltoall+Allgather";
  }

  void start(std::span<const float> params) override {
    if (auto s = sync_.make_state(params, static_cast<std::uint32_t>(world_), static_cast<std::uint32_t>(rank_), st_); !s)
      fail("local steps make_state", s);
  }

  // No exchange per step: each rank steps on its own gradient.
  traffic average(std::span<const float> grad, std::span<float> avg) override {
    std::copy(grad.begin(), grad.end(), avg.begin());
    return {};
  }

  traffic after_step(std::span<float> params) override {
    sync_.advance(st_);
    traffic t;
    for (std::size_t f = 0; f < sync_.get_config().fragments; ++f) {
      if (sync_.sends(st_, f))
        for (std::size_t k = 0; k < sync_.phase_count(); ++k) t += run_phase(f, k, params);
      if (sync_.applies(st_, f))
        if (auto s = sync_.apply(f, st_, params); !s) fail("local steps apply", s);
    }
    return t;
  }

 private:
  traffic run_phase(std::size_t f, std::size_t k, std::span<const float> params) {
    const auto x = sync_.describe(f, k, st_);
    if (!x) fail("local steps describe", x.error());
    send_.assign((x->send_bytes + 7) / 8, 0);  // u64 storage: received slots must be 8-byte aligned
    recv_.assign((x->receive_bytes + 7) / 8, 0);
    const std::span<std::byte> out = std::as_writable_bytes(std::span(send_)).first(x->send_bytes);
    if (auto s = sync_.encode(f, k, k == 0 ? params : std::span<const float>{}, st_, out); !s) fail("local steps encode", s);
    const int slot = static_cast<int>(x->op == gc::localsteps::collective::all_to_all ? x->send_bytes / world_ : x->send_bytes);
    traffic t;
    if (x->op == gc::localsteps::collective::all_reduce) {
      if (x->type != gc::summable::wire_type::f32) fail("local steps", {gc::errc::invalid_argument, "this example all-reduces f32 only"});
      MPI_Allreduce(send_.data(), recv_.data(), static_cast<int>(x->send_bytes / 4), MPI_FLOAT, MPI_SUM, comm_);
      t = all_reduce_traffic(static_cast<double>(x->send_bytes), world_);
    } else if (x->op == gc::localsteps::collective::all_to_all) {
      MPI_Alltoall(send_.data(), slot, MPI_BYTE, recv_.data(), slot, MPI_BYTE, comm_);
      t = {static_cast<double>(x->send_bytes), static_cast<double>(world_ - 1) * slot};
    } else {
      MPI_Allgather(send_.data(), slot, MPI_BYTE, recv_.data(), slot, MPI_BYTE, comm_);
      t = {static_cast<double>(slot), static_cast<double>(world_ - 1) * slot};
    }
    const std::span<const std::byte> in = std::as_bytes(std::span(recv_)).first(x->receive_bytes);
    if (auto s = sync_.receive(f, k, st_, in); !s) fail("local steps receive", s);
    return t;
  }

  std::string name_;
  gc::localsteps::synchroniser<Path> sync_;
  typename gc::localsteps::synchroniser<Path>::state_type st_;
  MPI_Comm comm_;
  int world_ = 1, rank_ = 0;
  std::vector<std::uint64_t> send_, recv_;
};

}  // namespace mpi_example
