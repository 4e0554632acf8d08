#pragma once
// localsteps::synchroniser<Path>: local steps (DiLoCo, Streaming DiLoCo, SparseLoCo) on the CPU
// over any codec on any aggregation path (docs/localsteps.md). The flow of every call, its
// phases and its guarantees are written once in localsteps/flow.hpp; this header is its CPU
// front end: the state in host memory (localsteps/state.hpp) and the calls without an executor.
//
//   localsteps::synchroniser<Path> sync(cfg, path);
//   sync.make_state(params, W, rank, st);                 // once: every anchor = params
//   after every inner step: sync.advance(st); then for each fragment f
//     if (sync.sends(st, f))   for each phase k: describe(f, k) / encode(f, k, ...) / transport / receive(f, k, ...)
//     if (sync.applies(st, f)) apply(f, st, params)
//
// Path is a phase codec of the library:
//   summable::cast<Q>, summable::random_k<Q>   one all-reduce (SUM) of casts: collective::all_reduce
//   gather::codec<C>                           any compressor, frames all-gathered: collective::all_gather
//   sharded::codec<C> in mode::all_reduce      any compressor, all-to-all then all-gather
// SparseLoCo's outer rule is the codec's own error feedback with a decay (feedback::residual's
// scale: e = beta e + d; send C(e); e -= sent) and an outer step without momentum.
// Parameters are float or bf16_t spans; the anchors, momenta and means are fp32.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/concepts.hpp"
#include "core/numeric.hpp"
#include "core/status.hpp"
#include "cpu/localsteps.hpp"
#include "localsteps/flow.hpp"
#include "localsteps/state.hpp"

namespace gradcomp::localsteps {

namespace detail {

template <class Path>
typename Path::state_type make_path_state(const Path& p, std::size_t n, std::uint32_t world, std::uint32_t rank, status& s) {
  typename Path::state_type st{};
  if constexpr (summable_path<Path>) {
    s = p.validate();
    if (s) st = p.make_state(n, world, rank);
  } else {
    s = p.make_state(n, world, rank, st);
  }
  return st;
}

}  // namespace detail

template <class Path>
class synchroniser : public detail::flow<Path> {
  using flow = detail::flow<Path>;
  using ex_type = cpu::detail::localsteps_executor;

 public:
  using path_state = typename Path::state_type;
  using state_type = localsteps::state<path_state>;
  synchroniser(const config& c, const Path& p) : flow(c, p) {}

  // The state of rank `rank` of `world`, every anchor set to `params` (every rank starts from
  // the same parameters).
  status make_state(std::span<const float> params, std::uint32_t world, std::uint32_t rank, state_type& st) const {
    return make_state_of<float>(params, world, rank, st);
  }
  status make_state(std::span<const bf16_t> params, std::uint32_t world, std::uint32_t rank, state_type& st) const {
    return make_state_of<bf16_t>(params, world, rank, st);
  }

  result<exchange> describe(std::size_t f, std::size_t k, const state_type& st) const { return flow::describe(ex_type{}, f, k, st); }

  // Phase 0 reads the fragment of `params` (all parameters, st.size values); later phases do
  // not read it (pass an empty span). `out` holds describe(f, k).send_bytes.
  status encode(std::size_t f, std::size_t k, std::span<const float> params, state_type& st, std::span<std::byte> out) const {
    ex_type ex;
    return flow::template encode<float>(ex, f, k, params, st, out);
  }
  status encode(std::size_t f, std::size_t k, std::span<const bf16_t> params, state_type& st, std::span<std::byte> out) const {
    ex_type ex;
    return flow::template encode<bf16_t>(ex, f, k, params, st, out);
  }

  // `in` holds describe(f, k).receive_bytes as the transport delivered them. After the last
  // phase the mean pseudo-gradient is kept for apply(). On error nothing changes.
  status receive(std::size_t f, std::size_t k, state_type& st, std::span<const std::byte> in) const {
    ex_type ex;
    return flow::receive(ex, f, k, st, in);
  }

  // The outer step with the received mean, and the fragment of `params` replaced by (or mixed
  // with) the new anchor.
  status apply(std::size_t f, state_type& st, std::span<float> params) const {
    ex_type ex;
    return flow::template apply<float>(ex, f, st, params);
  }
  status apply(std::size_t f, state_type& st, std::span<bf16_t> params) const {
    ex_type ex;
    return flow::template apply<bf16_t>(ex, f, st, params);
  }

  // encode and apply on the fragment's own values (fragment(st, f).count of them), for a caller
  // that keeps its parameters apart; mark_applied after the caller's own outer step.
  status encode_fragment(std::size_t f, std::size_t k, std::span<const float> local, state_type& st, std::span<std::byte> out) const {
    ex_type ex;
    return flow::template encode_fragment<float>(ex, f, k, local, st, out);
  }
  status encode_fragment(std::size_t f, std::size_t k, std::span<const bf16_t> local, state_type& st, std::span<std::byte> out) const {
    ex_type ex;
    return flow::template encode_fragment<bf16_t>(ex, f, k, local, st, out);
  }
  status apply_fragment(std::size_t f, state_type& st, std::span<float> local) const {
    ex_type ex;
    return flow::template apply_fragment<float>(ex, f, st, local);
  }
  status apply_fragment(std::size_t f, state_type& st, std::span<bf16_t> local) const {
    ex_type ex;
    return flow::template apply_fragment<bf16_t>(ex, f, st, local);
  }
  status mark_applied(std::size_t f, state_type& st) const { return flow::mark_applied(ex_type{}, f, st); }

 private:
  template <class T>
  status make_state_of(std::span<const T> params, std::uint32_t world, std::uint32_t rank, state_type& st) const {
    if (status s = this->validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "local steps: world >= 1 and rank < world"};
    const config& c = this->get_config();
    state_type next;
    next.size = params.size();
    next.world = world;
    next.rank = rank;
    for (std::size_t f = 0; f < c.fragments; ++f) {
      fragment_state<path_state> fs;
      fs.range = fragment_of(params.size(), c.fragments, f);
      fs.anchor.resize(fs.range.count);
      for (std::size_t j = 0; j < fs.range.count; ++j) fs.anchor[j] = to_float(params[fs.range.offset + j]);
      if (c.momentum > 0.0f) fs.momentum.assign(fs.range.count, 0.0f);
      fs.values.assign(fs.range.count, 0.0f);
      status made;
      fs.path = detail::make_path_state(this->path(), fs.range.count, world, rank, made);
      if (!made) return made;
      next.fragments.push_back(std::move(fs));
    }
    st = std::move(next);
    return {};
  }
};

}  // namespace gradcomp::localsteps
