// Local steps (gc::localsteps) for gradcomp.localsteps: the configuration's checks, the staggered
// schedule and the per-element math of the pseudo-gradient and the outer step, so that Python and
// the C++ synchroniser share one definition. The exchange itself runs through the codecs' own
// bindings (Compressor, Sharded, SummableCast).

#include <gradcomp/localsteps/config.hpp>
#include <gradcomp/localsteps/outer.hpp>

#include <nanobind/stl/tuple.h>

#include <cstddef>
#include <tuple>

#include "arrays.hpp"

namespace gradcomp_py {

namespace ls = gc::localsteps;

namespace {

ls::config make_config(std::size_t period, std::size_t fragments, std::size_t overlap, float mix, float outer_lr, float momentum,
                       bool nesterov) {
  const ls::config c{period, fragments, overlap, mix, outer_lr, momentum, nesterov};
  check(ls::validate(c));
  return c;
}

std::span<float> floats(const out_array& a, std::size_t n, const char* what) {
  const std::span<float> s = float_span(a, what);
  if (s.size() != n) throw nb::value_error((std::string(what) + ": size differs from the fragment's").c_str());
  return s;
}

}  // namespace

void bind_localsteps(nb::module_& m) {
  m.def("_localsteps_check",
        [](std::size_t period, std::size_t fragments, std::size_t overlap, float mix, float outer_lr, float momentum, bool nesterov) {
          (void)make_config(period, fragments, overlap, mix, outer_lr, momentum, nesterov);
        },
        nb::arg("period"), nb::arg("fragments"), nb::arg("overlap"), nb::arg("mix"), nb::arg("outer_lr"), nb::arg("momentum"),
        nb::arg("nesterov"), "Raises gradcomp.Error (invalid_argument) for a configuration gc::localsteps::validate refuses.");
  m.def("_localsteps_fragment", [](std::size_t n, std::size_t fragments, std::size_t f) {
    const gc::chunk_range r = ls::fragment_of(n, fragments, f);
    return std::make_tuple(r.offset, r.count);
  }, nb::arg("n"), nb::arg("fragments"), nb::arg("f"), "(offset, count) of fragment f of n parameters.");
  m.def("_localsteps_due",
        [](std::size_t period, std::size_t fragments, std::size_t overlap, std::size_t f, std::uint64_t step) {
          const ls::config c{.period = period, .fragments = fragments, .overlap = overlap};
          check(ls::validate(c));
          return std::make_tuple(ls::sends_at(c, f, step), ls::applies_at(c, f, step));
        },
        nb::arg("period"), nb::arg("fragments"), nb::arg("overlap"), nb::arg("f"), nb::arg("step"),
        "(sends, applies): whether fragment f sends its pseudo-gradient, and applies its mean, after `step` inner steps.");
  m.def("_localsteps_pseudo_gradient", [](out_array anchor, out_array local, std::uint32_t world, out_array out) {
    const std::span<float> a = float_span(anchor, "anchor");
    const std::span<float> l = floats(local, a.size(), "local");
    const std::span<float> o = floats(out, a.size(), "out");
    if (world == 0) throw nb::value_error("world must be >= 1");
    const float w = static_cast<float>(world);
    nb::gil_scoped_release unlocked;
    for (std::size_t j = 0; j < a.size(); ++j) o[j] = ls::pseudo_gradient(a[j], l[j], w);
  }, nb::arg("anchor"), nb::arg("local"), nb::arg("world"), nb::arg("out"), "out = (anchor - local) / world (float32, CPU).");
  m.def("_localsteps_apply",
        [](out_array mean, out_array anchor, nb::handle momentum, out_array local, float outer_lr, float mu, bool nesterov, float mix) {
          const std::span<float> d = float_span(mean, "mean");
          const std::span<float> a = floats(anchor, d.size(), "anchor");
          const std::span<float> l = floats(local, d.size(), "local");
          std::span<float> m;
          if (!momentum.is_none()) m = floats(nb::cast<out_array>(momentum), d.size(), "momentum");
          const ls::outer_rule rule{outer_lr, mu, nesterov};
          nb::gil_scoped_release unlocked;
          for (std::size_t j = 0; j < d.size(); ++j) {
            ls::outer_step(rule, d[j], a[j], m.empty() ? nullptr : &m[j]);
            l[j] = ls::mixed(mix, l[j], a[j]);
          }
        },
        nb::arg("mean"), nb::arg("anchor"), nb::arg("momentum").none(), nb::arg("local"), nb::arg("outer_lr"), nb::arg("mu"),
        nb::arg("nesterov"), nb::arg("mix"),
        "The outer step on anchor (and momentum) with the mean pseudo-gradient; local = mix * local + (1 - mix) * anchor.");
}

}  // namespace gradcomp_py
