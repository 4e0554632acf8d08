// Local steps (gradcomp/localsteps.hpp) for gradcomp.localsteps: the library's flow bound as
// _LocalStepsFlow and _LocalStepsState, as Sharded is bound. Python runs the collectives: for each
// phase k of a fragment's sync, describe(f, k, state) gives the collective, its element type and
// the buffer sizes; encode fills the caller's uint8 tensor; the caller runs the collective and
// hands what it received to receive; apply runs the outer step. The schedule, the checks, the
// per-element math and the checkpoints are the library's.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.hpp"
#include "localsteps.hpp"

#include <gradcomp/localsteps/outer.hpp>

namespace gradcomp_py {

namespace ls = gc::localsteps;

namespace {

struct flow_box {
  std::unique_ptr<codec> comp;  // null for a summable cast
  std::unique_ptr<localsteps_flow> impl;
  std::string identity;
};

struct state_box {
  std::unique_ptr<localsteps_state> st;
};

template <class Q>
std::unique_ptr<localsteps_flow> cast_flow(const ls::config& c, bool feedback, const std::string& identity) {
  return std::make_unique<localsteps_impl<gc::summable::cast<Q>>>(c, gc::summable::cast<Q>({.feedback = feedback}), identity);
}

flow_box make_flow(const std::string& name, const std::string& path, const ls::config& c, const nb::kwargs& kw) {
  const std::string schedule = std::to_string(c.period) + ":" + std::to_string(c.fragments) + ":" + std::to_string(c.overlap);
  options o = to_options(kw);
  if (path == "summable") {
    bool feedback = true;
    for (const auto& [key, value] : o) {
      if (key != "error_feedback") bad_option(key, "is not an option of a summable cast (only error_feedback)");
      feedback = as_bool(key, value);
    }
    const std::string identity = name + ":summable:" + std::to_string(feedback) + ":" + schedule;
    if (name == "fp32") return {nullptr, cast_flow<gc::quantize::none>(c, feedback, identity), identity};
    if (name == "bf16") return {nullptr, cast_flow<gc::quantize::bf16>(c, feedback, identity), identity};
    if (name == "fp16") return {nullptr, cast_flow<gc::quantize::fp16>(c, feedback, identity), identity};
    raise(gc::errc::invalid_argument, "the summable path takes a cast: 'fp32', 'bf16' or 'fp16', not '" + name + "'");
  }
  if (path != "gather" && path != "sharded") raise(gc::errc::invalid_argument, "path must be 'summable', 'gather' or 'sharded'");
  std::unique_ptr<codec> comp = make_codec(name, o);
  const std::string identity = name + ":" + std::to_string(comp->codec_id()) + ":" + path + ":" + schedule;
  std::unique_ptr<localsteps_flow> impl = comp->make_localsteps(path == "sharded", c, identity);
  return {std::move(comp), std::move(impl), identity};
}

localsteps_state& state_of(const flow_box& f, state_box& s) {
  if (s.st->identity != f.identity)
    raise(gc::errc::codec_mismatch, "local-steps state made by another flow (" + s.st->identity + ", not " + f.identity + ")");
  return *s.st;
}

const char* collective_name(ls::collective c) {
  switch (c) {
    case ls::collective::all_reduce: return "all_reduce";
    case ls::collective::all_to_all: return "all_to_all";
    case ls::collective::all_gather: return "all_gather";
  }
  return "unknown";
}

// A fragment's values: a contiguous float32 or bfloat16 CPU array of the fragment's size.
std::tuple<void*, std::size_t, gc::dtype> fragment_values(const out_array& a, const localsteps_state& st, std::size_t f, const char* what) {
  check_cpu_contiguous(a, what);
  const gc::dtype t = grad_dtype(a, what);
  if (f >= st.fragments()) raise(gc::errc::invalid_argument, "local steps: no such fragment");
  return {const_cast<void*>(a.data()), a.size(), t};
}

// The per-element math and schedule as free functions, for the fragments Python keeps itself.
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
  nb::class_<state_box>(m, "_LocalStepsState",
      "One rank's state of a :class:`_LocalStepsFlow` (gradcomp.localsteps.LocalSteps holds it): per fragment the\n"
      "anchor, the values in flight (the received mean until its apply), the outer momentum and the path's state.")
      .def_prop_ro("size", [](const state_box& s) { return s.st->size(); }, "Parameters the state serves.")
      .def_prop_ro("world", [](const state_box& s) { return s.st->world(); }, "The number of replicas.")
      .def_prop_ro("rank", [](const state_box& s) { return s.st->rank(); }, "This replica's rank.")
      .def_prop_ro("step", [](const state_box& s) { return s.st->step(); }, "Inner steps taken (advance()).")
      .def("anchor", [](state_box& s, std::size_t f) { return float_view(s.st->anchor(f)); }, nb::arg("f"), nb::keep_alive<0, 1>(),
           "Fragment f's anchor, a float32 NumPy view of the state (writable).")
      .def("mean", [](state_box& s, std::size_t f) { return float_view(s.st->values(f)); }, nb::arg("f"), nb::keep_alive<0, 1>(),
           "Fragment f's values in flight: the received mean pseudo-gradient once the last phase arrived.")
      .def("momentum", [](state_box& s, std::size_t f) { return float_view(s.st->momentum(f)); }, nb::arg("f"),
           nb::keep_alive<0, 1>(), "Fragment f's outer momentum (empty without one).")
      .def("pending", [](const state_box& s, std::size_t f) { return s.st->order(f).pending; }, nb::arg("f"),
           "Whether fragment f's mean arrived and waits for its apply.")
      .def("in_flight", [](const state_box& s, std::size_t f) { return s.st->order(f).phases_done != 0; }, nb::arg("f"),
           "Whether fragment f's exchange has phases still to run.")
      .def("syncs", [](const state_box& s, std::size_t f) { return s.st->order(f).syncs; }, nb::arg("f"),
           "Syncs of fragment f applied.");

  nb::class_<flow_box>(m, "_LocalStepsFlow",
      "The library's local-steps flow (gradcomp::localsteps::synchroniser) for a codec on a path, driven by\n"
      "gradcomp.localsteps.LocalSteps: the schedule, the checks, the pseudo-gradient and outer step, and the\n"
      "checkpoints are C++; the caller runs each phase's collective.\n\n"
      "Args:\n"
      "    name (str): a codec of :func:`codecs` (``\"fp32\"``, ``\"bf16\"``, ``\"fp16\"`` on the summable path).\n"
      "    path (str): ``\"summable\"``, ``\"gather\"`` or ``\"sharded\"``.\n"
      "    period, fragments, overlap, mix, outer_lr, momentum, nesterov: gradcomp::localsteps::config.\n"
      "    **options: the codec's options (``error_feedback`` alone for a summable cast).\n\n"
      "Raises:\n"
      "    gradcomp.Error: an unknown codec, path or option, or a configuration the library refuses.")
      .def("__init__", [](flow_box* self, const std::string& name, const std::string& path, std::size_t period, std::size_t fragments,
                          std::size_t overlap, float mix, float outer_lr, float momentum, bool nesterov, nb::kwargs kw) {
        const ls::config c{period, fragments, overlap, mix, outer_lr, momentum, nesterov};
        check(ls::validate(c));
        new (self) flow_box(make_flow(name, path, c, kw));
      }, nb::arg("name"), nb::arg("path"), nb::arg("period"), nb::arg("fragments"), nb::arg("overlap"), nb::arg("mix"),
         nb::arg("outer_lr"), nb::arg("momentum"), nb::arg("nesterov"), nb::arg("options"))
      .def_prop_ro("identity", [](const flow_box& f) { return f.identity; }, "Codec, path and schedule as a string.")
      .def_prop_ro("phase_count", [](const flow_box& f) { return f.impl->phase_count(); }, "The path's phases per sync.")
      .def_static("fragment_of", [](std::size_t n, std::size_t fragments, std::size_t f) {
        const gc::chunk_range r = ls::fragment_of(n, fragments, f);
        return std::make_tuple(r.offset, r.count);
      }, nb::arg("n"), nb::arg("fragments"), nb::arg("f"), "(offset, count) of fragment f of n parameters.")
      .def("make_state", [](const flow_box& f, std::size_t n, std::uint32_t world, std::uint32_t rank) {
        return state_box{f.impl->make_state(n, world, rank)};
      }, nb::arg("n"), nb::arg("world"), nb::arg("rank"), "A state for n parameters with zero anchors (set them with anchor(f)).")
      .def("advance", [](const flow_box& f, state_box& s) { f.impl->advance(state_of(f, s)); }, nb::arg("state"),
           "After every inner step.")
      .def("due", [](const flow_box& f, state_box& s, std::size_t frag) {
        localsteps_state& st = state_of(f, s);
        return std::make_tuple(f.impl->sends(st, frag), f.impl->applies(st, frag));
      }, nb::arg("state"), nb::arg("f"), "(sends, applies): whether fragment f sends now, and whether its mean is applied now.")
      .def("describe", [](const flow_box& f, std::size_t frag, std::size_t k, state_box& s) {
        const ls::exchange x = f.impl->describe(frag, k, state_of(f, s));
        nb::dict d;
        d["name"] = x.name;
        d["collective"] = collective_name(x.op);
        d["type"] = gc::summable::to_string(x.type);
        d["send_bytes"] = x.send_bytes;
        d["receive_bytes"] = x.receive_bytes;
        return d;
      }, nb::arg("f"), nb::arg("k"), nb::arg("state"),
         "Phase k of fragment f's sync: ``collective`` (``\"all_reduce\"`` with SUM of ``type``, ``\"all_to_all\"``\n"
         "of equal slots, ``\"all_gather\"``), ``send_bytes`` and ``receive_bytes``.")
      .def("encode", [](const flow_box& f, std::size_t frag, std::size_t k, nb::handle local, state_box& s, out_array out) {
        localsteps_state& st = state_of(f, s);
        const std::span<std::byte> o = raw_view(out, "out");
        if (local.is_none()) {
          nb::gil_scoped_release unlocked;
          f.impl->encode(frag, k, nullptr, 0, gc::dtype::f32, st, o);
          return;
        }
        const auto [p, n, t] = fragment_values(nb::cast<out_array>(local), st, frag, "local");
        nb::gil_scoped_release unlocked;
        f.impl->encode(frag, k, p, n, t, st, o);
      }, nb::arg("f"), nb::arg("k"), nb::arg("local").none(), nb::arg("state"), nb::arg("out"),
         "Phase k of fragment f into ``out`` (describe's send_bytes); phase 0 reads the fragment's local values\n"
         "(float32 or bfloat16, the fragment's size), later phases take None.")
      .def("receive", [](const flow_box& f, std::size_t frag, std::size_t k, state_box& s, in_array in) {
        localsteps_state& st = state_of(f, s);
        const std::span<std::byte> i = raw_view(in, "received");
        nb::gil_scoped_release unlocked;
        f.impl->receive(frag, k, st, i);
      }, nb::arg("f"), nb::arg("k"), nb::arg("state"), nb::arg("received"),
         "What the collective of phase k delivered; after the last phase the mean waits for apply. Every byte is\n"
         "checked first: on error (gradcomp.Error) nothing changes.")
      .def("apply", [](const flow_box& f, std::size_t frag, state_box& s, out_array local) {
        localsteps_state& st = state_of(f, s);
        const auto [p, n, t] = fragment_values(local, st, frag, "local");
        nb::gil_scoped_release unlocked;
        f.impl->apply(frag, st, p, n, t);
      }, nb::arg("f"), nb::arg("state"), nb::arg("local"),
         "The outer step on fragment f's anchor with the received mean; ``local`` (the fragment's values) becomes\n"
         "mix * local + (1 - mix) * anchor.")
      .def("mark_applied", [](const flow_box& f, std::size_t frag, state_box& s) { f.impl->mark_applied(frag, state_of(f, s)); },
           nb::arg("f"), nb::arg("state"), "Ends fragment f's sync after the caller's own outer step on anchor(f) with mean(f).")
      .def("checkpoint", [](const flow_box& f, state_box& s) {
        const std::vector<std::byte> b = f.impl->checkpoint(state_of(f, s));
        return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
      }, nb::arg("state"), "The state's image (docs/wire-format.md, \"Local-steps checkpoint\"); no exchange may be in flight.")
      .def("load_checkpoint", [](const flow_box& f, state_box& s, nb::bytes image) {
        f.impl->load_checkpoint(state_of(f, s), {static_cast<const std::byte*>(image.data()), image.size()});
      }, nb::arg("state"), nb::arg("image"),
         "Restores an image of the same flow, size, world and rank; checked in full first (gradcomp.Error: nothing changes).")
      .def("restore_elastic", [](const flow_box& f, state_box& s, const std::vector<nb::bytes>& images) {
        std::vector<std::span<const std::byte>> views;
        for (const nb::bytes& b : images) views.emplace_back(static_cast<const std::byte*>(b.data()), b.size());
        f.impl->restore_elastic(state_of(f, s), views);
      }, nb::arg("state"), nb::arg("images"),
         "Restores every saved rank's image (in rank order) at another world size: anchors, momenta and step carried\n"
         "over, what the codec's error feedback owed kept as a sum over the ranks.");

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
