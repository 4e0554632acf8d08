#pragma once
// The CPU executor of local steps' flow (localsteps/flow.hpp): the state in host memory
// (localsteps/state.hpp), the per-element math as plain loops, the path's own host calls.

#include <cstddef>
#include <span>
#include <vector>

#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "../localsteps/flow.hpp"
#include "../localsteps/outer.hpp"
#include "../localsteps/state.hpp"

namespace gradcomp::cpu::detail {

struct localsteps_executor {
  template <class Fs>
  static bool sized(const Fs& fs) {
    return fs.anchor.size() == fs.range.count && fs.values.size() == fs.range.count;
  }
  template <class Fs>
  static bool has_momentum(const Fs& fs) {
    return !fs.momentum.empty();
  }

  template <class T, class Fs>
  status pseudo_gradient(Fs& fs, std::span<const T> local, float world) const {
    for (std::size_t j = 0; j < local.size(); ++j) fs.values[j] = localsteps::pseudo_gradient(fs.anchor[j], to_float(local[j]), world);
    return {};
  }

  template <class Path, class Fs>
  status encode(const Path& path, std::size_t k, Fs& fs, std::span<std::byte> out) const {
    const std::span<const float> sent = k == 0 ? std::span<const float>(fs.values) : std::span<const float>{};
    if constexpr (localsteps::detail::summable_path<Path>) {
      return path.encode(k, sent, fs.path, out);
    } else {
      return path.template encode<float>(k, sent, fs.path, out);
    }
  }

  template <class Path, class Fs>
  status receive(const Path& path, std::size_t k, Fs& fs, std::span<const std::byte> in, bool last) const {
    const std::span<float> out = last ? std::span<float>(fs.values) : std::span<float>{};
    if constexpr (localsteps::detail::summable_path<Path>) {
      // (a summable codec's receive writes only after its checks)
      if (status s = path.receive(k, fs.path, in, out); !s) return s;
      if (last) path.finish_step(fs.path);
      return {};
    } else {
      return path.template receive<float>(k, fs.path, in, out);
    }
  }

  template <class T, class Fs>
  status outer(const localsteps::outer_rule& rule, float mix, Fs& fs, std::span<T> local) const {
    for (std::size_t j = 0; j < local.size(); ++j) {
      localsteps::outer_step(rule, fs.values[j], fs.anchor[j], fs.momentum.empty() ? nullptr : &fs.momentum[j]);
      local[j] = from_float<T>(localsteps::mixed(mix, to_float(local[j]), fs.anchor[j]));
    }
    return {};
  }
};

}  // namespace gradcomp::cpu::detail
