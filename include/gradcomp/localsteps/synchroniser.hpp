#pragma once
// localsteps::synchroniser<Path>: DiLoCo's outer loop over any codec on any aggregation path
// (docs/localsteps.md). Per fragment of the parameters it keeps the anchor (the parameters of
// the last sync, fp32), the outer momentum and the path's state (the codec's per-rank and
// per-owner error feedback); it never touches a network. A sync of fragment f, in phases a
// transport maps onto its collectives:
//
//   encode(f, 0, params)   d = (anchor - params) / W over the fragment, into the path's first buffer
//   [encode(f, k) / receive(f, k) for each of the path's phases, the transport in between]
//   receive(f, last)       the mean pseudo-gradient, kept until the apply
//   apply(f, params)       the outer step on the anchor; params[fragment] = mix * params + (1 - mix) * anchor
//
// Path is a phase codec of the library:
//   summable::cast<Q>, summable::random_k<Q>   one all-reduce (SUM) of casts: exchange::all_reduce
//   gather::codec<C>                           any compressor, frames all-gathered: exchange::all_gather
//   sharded::codec<C> in mode::all_reduce      any compressor, all-to-all then all-gather
// SparseLoCo's outer rule is the codec's own error feedback with a decay (feedback::residual's
// scale: e = beta e + d; send C(e); e -= sent) and an outer step without momentum.
//
// Every rank decodes the same bytes in the same order and applies the same arithmetic, so the
// replicas' fragments are bit-identical after every apply with mix = 0. Calls are checked before
// anything is written: a bad buffer leaves the parameters and the state as they were.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/status.hpp"
#include "../summable/phases.hpp"
#include "config.hpp"
#include "outer.hpp"

namespace gradcomp::localsteps {

// What the transport does with a phase's buffers.
enum class collective : std::uint8_t {
  all_reduce = 1,  // element-wise SUM of `type` over the ranks (MPI_Allreduce, ncclAllReduce)
  all_to_all = 2,  // send_bytes / W to each rank; slot r of the receive buffer from rank r
  all_gather = 3,  // every rank sends send_bytes; slot r of the receive buffer from rank r
};

struct exchange {
  const char* name = "";
  collective op = collective::all_reduce;
  summable::wire_type type = summable::wire_type::f32;  // all_reduce: the element type
  std::size_t send_bytes = 0;
  std::size_t receive_bytes = 0;
};

template <class PathState>
struct fragment_state : sync_order {
  chunk_range range{0, 0};
  std::vector<float> anchor;    // the fragment's parameters after its last sync
  std::vector<float> momentum;  // the outer momentum (empty when momentum = 0)
  std::vector<float> values;    // the pseudo-gradient being sent, then the received mean
  PathState path;               // the path's state: the codec's error feedback
};

template <class PathState>
struct state {
  std::size_t size = 0;       // parameters
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;     // inner steps taken (advance())
  std::vector<fragment_state<PathState>> fragments;
};

namespace detail {

template <class Path>
inline constexpr bool summable_path = summable::is_summable_v<Path>;

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

template <class Path>
result<exchange> describe_path(const Path& p, std::size_t k, const typename Path::state_type& st) {
  const auto ph = p.describe(k, st);
  if (!ph) return ph.error();
  if constexpr (summable_path<Path>) {
    if (ph->op != summable::reduction::sum) return status{errc::invalid_argument, "local steps: a summable path must reduce by SUM"};
    return exchange{ph->name, collective::all_reduce, ph->type, ph->bytes(), ph->bytes()};
  } else if constexpr (requires { ph->op; }) {  // the sharded path
    return exchange{ph->name, ph->op == std::remove_cvref_t<decltype(ph->op)>::all_to_all ? collective::all_to_all : collective::all_gather,
                    summable::wire_type::f32, ph->send_bytes(), ph->receive_bytes()};
  } else {  // the gather path
    return exchange{ph->name, collective::all_gather, summable::wire_type::f32, ph->send_bytes(), ph->receive_bytes()};
  }
}

}  // namespace detail

template <class Path>
class synchroniser {
 public:
  using path_type = Path;
  using path_state = typename Path::state_type;
  using state_type = localsteps::state<path_state>;

  synchroniser(const config& c, const Path& p) : cfg_(c), path_(p) {}

  const config& get_config() const { return cfg_; }
  // Between syncs, e.g. an outer learning-rate schedule (the fragment layout must not change).
  void set_config(const config& c) { cfg_ = c; }
  const Path& path() const { return path_; }
  std::size_t phase_count() const { return path_.phase_count(); }

  status validate() const {
    if (status s = localsteps::validate(cfg_); !s) return s;
    if constexpr (requires { path_.get_mode(); })
      if (path_.get_mode() != std::remove_cvref_t<decltype(path_.get_mode())>::all_reduce)
        return {errc::invalid_argument, "local steps: the sharded path must run in all_reduce mode (every rank needs the mean)"};
    return path_.validate();
  }

  // The state of rank `rank` of `world`, every anchor set to `params` (every rank starts from
  // the same parameters).
  status make_state(std::span<const float> params, std::uint32_t world, std::uint32_t rank, state_type& st) const {
    if (status s = validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "local steps: world >= 1 and rank < world"};
    state_type next;
    next.size = params.size();
    next.world = world;
    next.rank = rank;
    for (std::size_t f = 0; f < cfg_.fragments; ++f) {
      fragment_state<path_state> fs;
      fs.range = fragment_of(params.size(), cfg_.fragments, f);
      const auto first = params.begin() + static_cast<std::ptrdiff_t>(fs.range.offset);
      fs.anchor.assign(first, first + static_cast<std::ptrdiff_t>(fs.range.count));
      if (cfg_.momentum > 0.0f) fs.momentum.assign(fs.range.count, 0.0f);
      fs.values.assign(fs.range.count, 0.0f);
      status made;
      fs.path = detail::make_path_state(path_, fs.range.count, world, rank, made);
      if (!made) return made;
      next.fragments.push_back(std::move(fs));
    }
    st = std::move(next);
    return {};
  }

  // --- The schedule. advance() after every inner step; then sends(f) says which fragments
  // start a sync and applies(f) which apply their mean (both true at once when overlap = 0).
  void advance(state_type& st) const { ++st.step; }
  bool sends(const state_type& st, std::size_t f) const { return sends_at(cfg_, f, st.step); }
  bool applies(const state_type& st, std::size_t f) const { return applies_at(cfg_, f, st.step); }
  chunk_range fragment(const state_type& st, std::size_t f) const { return st.fragments.at(f).range; }

  // --- The phases of fragment f's exchange.
  result<exchange> describe(std::size_t f, std::size_t k, const state_type& st) const {
    if (status s = check(f, st); !s) return s;
    if (k >= phase_count()) return status{errc::invalid_argument, "local steps: phase beyond the path's phases"};
    return detail::describe_path(path_, k, st.fragments[f].path);
  }

  // Phase 0 reads the fragment of `params` (all parameters, st.size values); later phases do
  // not read it (pass an empty span). `out` holds describe(f, k).send_bytes.
  status encode(std::size_t f, std::size_t k, std::span<const float> params, state_type& st, std::span<std::byte> out) const {
    const result<exchange> x = describe(f, k, st);
    if (!x) return x.error();
    fragment_state<path_state>& fs = st.fragments[f];
    if (status s = fs.check_encode(k, !params.empty()); !s) return s;
    if (out.size() != x->send_bytes) return {errc::size_mismatch, "local steps: send buffer differs from describe().send_bytes"};
    std::span<const float> sent;
    if (k == 0) {
      if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
      const float w = static_cast<float>(st.world);
      for (std::size_t j = 0; j < fs.range.count; ++j) fs.values[j] = pseudo_gradient(fs.anchor[j], params[fs.range.offset + j], w);
      sent = fs.values;
    }
    if constexpr (detail::summable_path<Path>) {
      return path_.encode(k, sent, fs.path, out);
    } else {
      return path_.template encode<float>(k, sent, fs.path, out);
    }
  }

  // `in` holds describe(f, k).receive_bytes as the transport delivered them. After the last
  // phase the mean pseudo-gradient is kept for apply(). On error nothing changes.
  status receive(std::size_t f, std::size_t k, state_type& st, std::span<const std::byte> in) const {
    const result<exchange> x = describe(f, k, st);
    if (!x) return x.error();
    fragment_state<path_state>& fs = st.fragments[f];
    if (status s = fs.check_receive(k); !s) return s;
    const bool last = k + 1 == phase_count();
    if constexpr (detail::summable_path<Path>) {
      // (a summable codec's receive writes only after its checks)
      if (status s = path_.receive(k, fs.path, in, last ? std::span<float>(fs.values) : std::span<float>{}); !s) return s;
      if (last) path_.finish_step(fs.path);
    } else {
      if (status s = path_.template receive<float>(k, fs.path, in, last ? std::span<float>(fs.values) : std::span<float>{}); !s) return s;
    }
    fs.received(k, last);
    return {};
  }

  // The outer step with the received mean, and the fragment of `params` replaced by (or mixed
  // with) the new anchor.
  status apply(std::size_t f, state_type& st, std::span<float> params) const {
    if (status s = check(f, st); !s) return s;
    fragment_state<path_state>& fs = st.fragments[f];
    if (status s = fs.check_apply(); !s) return s;
    if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
    if (!fs.momentum.empty() != (cfg_.momentum > 0.0f))
      return {errc::invalid_argument, "local steps: momentum switched on or off after make_state"};
    const outer_rule rule{cfg_.outer_lr, cfg_.momentum, cfg_.nesterov};
    for (std::size_t j = 0; j < fs.range.count; ++j) {
      outer_step(rule, fs.values[j], fs.anchor[j], fs.momentum.empty() ? nullptr : &fs.momentum[j]);
      float& p = params[fs.range.offset + j];
      p = mixed(cfg_.mix, p, fs.anchor[j]);
    }
    fs.applied();
    return {};
  }

 private:
  status check(std::size_t f, const state_type& st) const {
    if (status s = validate(); !s) return s;
    if (st.fragments.size() != cfg_.fragments || f >= st.fragments.size())
      return {errc::invalid_argument, "local steps: no such fragment (or a state of another fragment count)"};
    const fragment_state<path_state>& fs = st.fragments[f];
    if (fs.range != fragment_of(st.size, cfg_.fragments, f) || fs.anchor.size() != fs.range.count || fs.values.size() != fs.range.count)
      return {errc::size_mismatch, "local steps: state not sized by this synchroniser's make_state"};
    return {};
  }
  config cfg_;
  Path path_;
};

}  // namespace gradcomp::localsteps
