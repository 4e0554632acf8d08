#pragma once
// Local steps' flow, written once for every backend (docs/localsteps.md): DiLoCo's outer loop
// over any codec on any aggregation path. Per fragment of the parameters a rank keeps the anchor
// (the parameters of the last sync, fp32), the outer momentum and the path's state (the codec's
// per-rank and per-owner error feedback); nothing here touches a network. A sync of fragment f,
// in phases a transport maps onto its collectives:
//
//   encode(f, 0, params)   d = (anchor - params) / W over the fragment, through the path's first phase
//   [encode(f, k) / receive(f, k) for each of the path's phases, the transport in between]
//   receive(f, last)       the mean pseudo-gradient, kept until the apply
//   apply(f, params)       the outer step on the anchor; params[fragment] = mix * params + (1 - mix) * anchor
//
// encode and apply take all parameters (st.size values) or, as encode_fragment and
// apply_fragment, only the fragment's own values; mark_applied ends a sync whose outer step the
// caller ran itself (any optimizer on the anchor, with the mean as its gradient).
//
// The parameters are float32 or bfloat16 (the anchor, the momentum and the mean stay fp32; a
// bf16 parameter is read exactly and written rounded to nearest even). Every rank decodes the
// same bytes in the same order and runs the same arithmetic (localsteps/outer.hpp), so the
// replicas' fragments are bit-identical after every apply with mix = 0, on either backend.
// Argument and order errors come back before anything is written.
//
// detail::flow<Path> runs each call over an executor Ex of a backend (cpu/localsteps.hpp,
// cuda/localsteps.cuh), which supplies:
//   sized(fs) -> bool                                 the fragment's arrays were made for its range
//   has_momentum(fs) -> bool                          it keeps an outer momentum
//   pseudo_gradient<T>(fs, local, world) -> status    fs's values = (anchor - local) / W
//   encode(path, k, fs, out) -> status                the path's encode of phase k (phase 0 sends fs's values)
//   receive(path, k, fs, in, last) -> status          the path's receive (last: the mean into fs's values)
//   outer<T>(rule, mix, fs, local) -> status          the outer step and the apply over the fragment
// A host executor returns data errors at once; a device executor reports them in device memory
// and gates the apply on them (cuda/localsteps.cuh).

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/concepts.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "../summable/phases.hpp"
#include "config.hpp"
#include "outer.hpp"
#include "schedule.hpp"

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

namespace detail {

template <class Path>
inline constexpr bool summable_path = summable::is_summable_v<Path>;

// Phase k of a path as the transport sees it: a summable path's all-reduce (SUM only), the
// sharded path's all-to-all and all-gather, the gather path's all-gather.
template <class Path, class PathState>
result<exchange> describe_path(const Path& p, std::size_t k, const PathState& st) {
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

template <class T>
inline constexpr bool parameter_element = std::is_same_v<T, float> || std::is_same_v<T, bf16_t>;

template <class Path>
class flow {
 public:
  using path_type = Path;

  flow(const config& c, const Path& p) : cfg_(c), path_(p) {}

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

  // --- The schedule. advance() after every inner step; then sends(f) says which fragments
  // start a sync and applies(f) which apply their mean (both true at once when overlap = 0).
  template <class St>
  void advance(St& st) const {
    ++st.step;
  }
  template <class St>
  bool sends(const St& st, std::size_t f) const {
    return sends_at(cfg_, f, st.step);
  }
  template <class St>
  bool applies(const St& st, std::size_t f) const {
    return applies_at(cfg_, f, st.step);
  }
  template <class St>
  chunk_range fragment(const St& st, std::size_t f) const {
    return st.fragments.at(f).range;
  }

  // --- The phases of fragment f's exchange.
  template <class Ex, class St>
  result<exchange> describe(const Ex& ex, std::size_t f, std::size_t k, const St& st) const {
    if (status s = check(ex, f, st); !s) return s;
    if (k >= phase_count()) return status{errc::invalid_argument, "local steps: phase beyond the path's phases"};
    return describe_path(path_, k, st.fragments[f].path);
  }

  // Phase 0 reads the fragment of `params` (all parameters, st.size values); later phases do not
  // read it (an empty span). `out` holds describe(f, k).send_bytes.
  template <class T, class Ex, class St>
  status encode(Ex& ex, std::size_t f, std::size_t k, std::span<const T> params, St& st, std::span<std::byte> out) const {
    if (status s = check(ex, f, st); !s) return s;
    if (params.empty()) return encode_fragment<T>(ex, f, k, params, st, out);
    if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
    return encode_fragment<T>(ex, f, k, params.subspan(st.fragments[f].range.offset, st.fragments[f].range.count), st, out);
  }

  // The same with only the fragment's own values (fragment(st, f).count of them), for a caller
  // that keeps its parameters apart (several tensors, a shard of each).
  template <class T, class Ex, class St>
  status encode_fragment(Ex& ex, std::size_t f, std::size_t k, std::span<const T> local, St& st, std::span<std::byte> out) const {
    static_assert(parameter_element<T>, "local steps: parameters are float or bf16_t");
    const result<exchange> x = describe(ex, f, k, st);
    if (!x) return x.error();
    auto& fs = st.fragments[f];
    if (status s = fs.check_encode(k, !local.empty()); !s) return s;
    if (out.size() != x->send_bytes) return {errc::size_mismatch, "local steps: send buffer differs from describe().send_bytes"};
    if (k == 0) {
      if (local.size() != fs.range.count) return {errc::size_mismatch, "local steps: parameters differ from the fragment's size"};
      if (status s = ex.template pseudo_gradient<T>(fs, local, static_cast<float>(st.world)); !s) return s;
    }
    return ex.encode(path_, k, fs, out);
  }

  // `in` holds describe(f, k).receive_bytes as the transport delivered them. After the last
  // phase the mean pseudo-gradient waits for apply(). On error nothing changes.
  template <class Ex, class St>
  status receive(Ex& ex, std::size_t f, std::size_t k, St& st, std::span<const std::byte> in) const {
    const result<exchange> x = describe(ex, f, k, st);
    if (!x) return x.error();
    auto& fs = st.fragments[f];
    if (status s = fs.check_receive(k); !s) return s;
    const bool last = k + 1 == phase_count();
    if (status s = ex.receive(path_, k, fs, in, last); !s) return s;
    fs.received(k, last);
    return {};
  }

  // The outer step with the received mean, and the fragment of `params` replaced by (or mixed
  // with) the new anchor.
  template <class T, class Ex, class St>
  status apply(Ex& ex, std::size_t f, St& st, std::span<T> params) const {
    if (status s = check(ex, f, st); !s) return s;
    if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
    return apply_fragment<T>(ex, f, st, params.subspan(st.fragments[f].range.offset, st.fragments[f].range.count));
  }

  // The same on the fragment's own values.
  template <class T, class Ex, class St>
  status apply_fragment(Ex& ex, std::size_t f, St& st, std::span<T> local) const {
    static_assert(parameter_element<T>, "local steps: parameters are float or bf16_t");
    if (status s = check(ex, f, st); !s) return s;
    auto& fs = st.fragments[f];
    if (status s = fs.check_apply(); !s) return s;
    if (local.size() != fs.range.count) return {errc::size_mismatch, "local steps: parameters differ from the fragment's size"};
    if (ex.has_momentum(fs) != (cfg_.momentum > 0.0f))
      return {errc::invalid_argument, "local steps: momentum switched on or off after make_state"};
    const outer_rule rule{cfg_.outer_lr, cfg_.momentum, cfg_.nesterov};
    if (status s = ex.template outer<T>(rule, cfg_.mix, fs, local); !s) return s;
    fs.applied();
    return {};
  }

  // For a caller whose own outer optimizer stepped the anchor with the received mean (and wrote
  // the parameters): the fragment's sync is complete.
  template <class Ex, class St>
  status mark_applied(const Ex& ex, std::size_t f, St& st) const {
    if (status s = check(ex, f, st); !s) return s;
    if (status s = st.fragments[f].check_apply(); !s) return s;
    st.fragments[f].applied();
    return {};
  }

  template <class Ex, class St>
  status check(const Ex& ex, std::size_t f, const St& st) const {
    if (status s = validate(); !s) return s;
    if (st.fragments.size() != cfg_.fragments || f >= st.fragments.size())
      return {errc::invalid_argument, "local steps: no such fragment (or a state of another fragment count)"};
    const auto& fs = st.fragments[f];
    if (fs.range != fragment_of(st.size, cfg_.fragments, f) || !ex.sized(fs))
      return {errc::size_mismatch, "local steps: state not made by this synchroniser's make_state"};
    return {};
  }

 private:
  config cfg_;
  Path path_;
};

}  // namespace detail
}  // namespace gradcomp::localsteps
