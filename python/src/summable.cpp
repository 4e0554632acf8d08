// Summable codecs with phases (summable/phases.hpp): TAGC-2 (tagc::codec) and the summable
// casts (summable::cast<Q>), as gradcomp.Tagc and gradcomp.SummableCast. Python runs the
// collectives: for each phase k, describe(k, state) gives the element type, the reduction and
// the count; encode(k, grad, state, buffer) fills the caller's tensor; the caller reduces it
// (all_reduce / reduce_scatter_tensor) and hands the result to receive(k, state, reduced, out).
// Every array is used in place; the GIL is released while the library works.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "arrays.hpp"

namespace gradcomp_py {

namespace {

using cast_f32 = gc::summable::cast<gc::quantize::none>;
using cast_bf16 = gc::summable::cast<gc::quantize::bf16>;
using cast_f16 = gc::summable::cast<gc::quantize::fp16>;
using any_codec = std::variant<gc::tagc::codec, cast_f32, cast_bf16, cast_f16>;
using any_state = std::variant<gc::tagc::state, gc::summable::rank_state>;

struct phase_state {
  any_state st;       // a CPU state; for a device TAGC state, a tagc::state of its size, world and rank only
  std::string owner;  // the codec (and config) that made it
  int device = -1;    // a state on this CUDA device (dev or cast), or -1
  std::shared_ptr<device_tagc> dev{};
  std::shared_ptr<device_cast> cast{};  // st then holds the step (and an unused residual)
};

struct phase_codec {
  any_codec c;
  std::string identity;
  std::string label;  // repr: how it was made and its key configuration
  std::shared_ptr<device_checks> checks = std::make_shared<device_checks>();
};

template <class Q>
constexpr gc::summable::wire_type wire_of(const gc::summable::cast<Q>&) {
  return gc::summable::detail::wire_of<Q>();
}

template <class S>
S& state_of(const phase_codec& pc, phase_state& ps) {
  if (ps.owner != pc.identity) raise({gc::errc::codec_mismatch, "state made by another codec or configuration"});
  return std::get<S>(ps.st);
}

// --- TAGC configuration from keyword options.
gc::summable::wire_type as_cells(const std::string& key, const option_value& v) {
  const std::string s = as_string(key, v);
  if (s == "bf16" || s == "bfloat16") return gc::summable::wire_type::bf16;
  if (s == "fp32" || s == "float32") return gc::summable::wire_type::f32;
  bad_option(key, "must be 'bf16' or 'fp32'");
}

gc::tagc::config tagc_config(const std::string& preset, const options& o) {
  gc::tagc::config c;
  if (preset == "tagc2") c = gc::tagc::preset_tagc2();
  else if (preset == "v1") c = gc::tagc::preset_v1();
  else if (preset != "default") bad_option("preset", "must be 'default', 'tagc2' or 'v1'");
  for (const auto& [key, v] : o) {
    auto& s = c.select;
    if (key == "density") s.density = as_double(key, v);
    else if (key == "estimate") s.estimate = as_rule(key, v);
    else if (key == "sample_fraction") s.sample_fraction = as_double(key, v);
    else if (key == "min_ratio") s.min_ratio = as_double(key, v);
    else if (key == "max_ratio") s.max_ratio = as_double(key, v);
    else if (key == "max_tries") s.max_tries = static_cast<unsigned>(as_int(key, v));
    else if (key == "block") c.block = static_cast<std::uint32_t>(as_int(key, v));
    else if (key == "sizing") {
      const std::string z = as_string(key, v);
      if (z == "ratio") c.rows = gc::tagc::sizing::ratio;
      else if (z == "adaptive") c.rows = gc::tagc::sizing::adaptive;
      else bad_option(key, "must be 'ratio' or 'adaptive'");
    } else if (key == "ratio") c.ratio = as_double(key, v);
    else if (key == "cells_per_item") c.cells_per_item = as_double(key, v);
    else if (key == "cells") c.cells = as_cells(key, v);
    else if (key == "bitmap") {
      const std::string z = as_string(key, v);
      if (z == "or") c.bitmap = gc::tagc::bitmap_mode::bitwise_or;
      else if (z == "sum_safe") c.bitmap = gc::tagc::bitmap_mode::sum_safe;
      else bad_option(key, "must be 'or' or 'sum_safe'");
    } else if (key == "max_rounds") c.max_rounds = static_cast<std::uint32_t>(as_int(key, v));
    else if (key == "seed") c.seed = static_cast<std::uint32_t>(as_int(key, v));
    else bad_option(key, "is not an option of TAGC");
  }
  check(gc::tagc::validate(c));
  return c;
}

options tagc_options(const gc::tagc::config& c) {
  options o;
  o["density"] = c.select.density;
  o["estimate"] = std::string(c.select.estimate == gc::sparsify::threshold::rule::tagc ? "tagc" : "dgc");
  o["sample_fraction"] = c.select.sample_fraction;
  o["min_ratio"] = c.select.min_ratio;
  o["max_ratio"] = c.select.max_ratio;
  o["max_tries"] = static_cast<long long>(c.select.max_tries);
  o["block"] = static_cast<long long>(c.block);
  o["sizing"] = std::string(c.rows == gc::tagc::sizing::ratio ? "ratio" : "adaptive");
  o["ratio"] = c.ratio;
  o["cells_per_item"] = c.cells_per_item;
  o["cells"] = std::string(c.cells == gc::summable::wire_type::bf16 ? "bf16" : "fp32");
  o["bitmap"] = std::string(c.bitmap == gc::tagc::bitmap_mode::bitwise_or ? "or" : "sum_safe");
  o["max_rounds"] = static_cast<long long>(c.max_rounds);
  o["seed"] = static_cast<long long>(c.seed);
  return o;
}

nb::dict describe_dict(const gc::summable::phase& p) {
  nb::dict d;
  d["name"] = p.name;
  d["type"] = gc::summable::to_string(p.type);
  d["op"] = p.op == gc::summable::reduction::sum ? "sum" : p.op == gc::summable::reduction::max ? "max" : "bor";
  d["count"] = p.count;
  d["bytes"] = p.bytes();
  d["shardable"] = p.shardable;
  d["shard_count"] = p.shard_count();
  d["world"] = p.world;
  d["headroom_bits"] = p.headroom_bits;
  return d;
}

// The checked byte view of a phase buffer of `expect` bytes, element size `elem`.
template <class A>
std::span<std::byte> phase_bytes(const A& a, const char* what, std::size_t elem) {
  const auto b = raw_view(a, what);
  if (a.itemsize() != elem)
    throw nb::type_error((std::string(what) + ": element size differs from the phase's type (u32: int32, bf16: bfloat16, f32: float32)").c_str());
  return b;
}

// The state's device must be the call's arrays' (-1: the CPU).
void check_call_device(const phase_state& ps, int device, const char* call) {
  if (ps.device != device)
    throw nb::value_error((std::string(call) + ": the state is on " + device_name(ps.device) + ", the arrays are on " +
                           device_name(device) + " (PhaseCodec.make_state(n, world, rank, device=...))")
                              .c_str());
}

// A contiguous CUDA array's data, of element size `elem` (phase buffers) or float32 (elem 0).
template <class A>
std::byte* device_data(const A& a, const char* what, std::size_t elem) {
  check_contiguous(a, what);
  if (elem == 0 && a.dtype() != nb::dtype<float>()) throw nb::type_error((std::string(what) + ": float32 expected").c_str());
  if (elem != 0 && a.itemsize() != elem)
    throw nb::type_error((std::string(what) + ": element size differs from the phase's type (u32: int32, bf16: bfloat16, f32: float32)").c_str());
  return static_cast<std::byte*>(const_cast<void*>(a.data()));
}

gc::summable::phase describe(const phase_codec& pc, std::size_t k, phase_state& ps) {
  if (ps.dev) {
    if (ps.owner != pc.identity) raise({gc::errc::codec_mismatch, "state made by another codec or configuration"});
    return ps.dev->describe(k);
  }
  return std::visit([&](const auto& c) -> gc::summable::phase {
    using C = std::remove_cvref_t<decltype(c)>;
    const auto p = c.describe(k, state_of<typename C::state_type>(pc, ps));
    if (!p) raise(p.error());
    return *p;
  }, pc.c);
}

const gc::tagc::codec& tagc_of(const phase_codec& pc) {
  if (const auto* t = std::get_if<gc::tagc::codec>(&pc.c)) return *t;
  raise({gc::errc::invalid_argument, "only TAGC states have checkpoints (summable casts keep no state across steps)"});
}

// A device state's contents in a fresh host state (checkpoints), and back.
gc::tagc::state host_copy(const gc::tagc::codec& c, const phase_state& ps, bool download) {
  const auto& meta = std::get<gc::tagc::state>(ps.st);
  gc::tagc::state h;
  check(c.make_state(meta.size, meta.world, meta.rank, h));
  if (download) ps.dev->download(h, current_stream(ps.device));
  return h;
}

// Runs a checkpoint restore on the state: a CPU state in place; a device state through a fresh
// host state, uploaded only when the restore succeeds (the state is unchanged otherwise).
template <class F>
void restore_tagc(const phase_codec& pc, phase_state& ps, F restore) {
  if (!ps.dev) {
    check(restore(state_of<gc::tagc::state>(pc, ps)));
    return;
  }
  describe(pc, 0, ps);  // the owner check
  gc::tagc::state h = host_copy(tagc_of(pc), ps, false);
  check(restore(h));
  ps.dev->upload(h, current_stream(ps.device));
}

phase_codec make_tagc(const std::string& preset, const nb::kwargs& kw) {
  const gc::tagc::codec c(tagc_config(preset, to_options(kw)));
  const nb::dict cfg = to_dict(tagc_options(c.get_config()));
  std::string label = "gradcomp.Tagc('" + preset + "'";
  for (const char* key : {"density", "sizing", "block", "bitmap", "cells"})
    label += std::string(", ") + key + "=" + nb::cast<std::string>(nb::repr(cfg[key]));
  return {c, "tagc:" + std::to_string(c.codec_id()) + ":" + std::to_string(gc::tagc::select_fingerprint(c.get_config())),
          label + ")"};
}

phase_codec make_cast(const std::string& wire, bool feedback) {
  const std::string fb = std::to_string(feedback);
  const auto label = [&](const char* w) {
    return std::string("gradcomp.SummableCast('") + w + "', feedback=" + (feedback ? "True" : "False") + ")";
  };
  if (wire == "fp32" || wire == "float32") return {cast_f32({.feedback = feedback}), "cast:fp32:" + fb, label("fp32")};
  if (wire == "bf16" || wire == "bfloat16") return {cast_bf16({.feedback = feedback}), "cast:bf16:" + fb, label("bf16")};
  if (wire == "fp16" || wire == "float16") return {cast_f16({.feedback = feedback}), "cast:fp16:" + fb, label("fp16")};
  bad_option("wire", "must be 'fp32', 'bf16' or 'fp16'");
}

}  // namespace

void bind_summable(nb::module_& m) {
  nb::class_<phase_state>(m, "PhaseState",
      "One rank's state of a :class:`PhaseCodec`: residual, thresholds, step.\n\n"
      "Made by :meth:`PhaseCodec.make_state` for a buffer of a fixed size, world size and rank; only the codec\n"
      "(and configuration) that made it accepts it. Arrays are NumPy views of the C++ state (no copies).")
      .def_prop_ro("size", [](const phase_state& s) { return std::visit([](const auto& x) { return x.size; }, s.st); },
                   "Elements of the buffer the state serves.")
      .def_prop_ro("world", [](const phase_state& s) { return std::visit([](const auto& x) { return x.world; }, s.st); },
                   "The world size (ranks summing their buffers).")
      .def_prop_ro("rank", [](const phase_state& s) { return std::visit([](const auto& x) { return x.rank; }, s.st); },
                   "This rank (its shard of a shardable phase).")
      .def_prop_ro("device", [](const phase_state& s) { return device_name(s.device); },
                   "Where the state lives: ``\"cpu\"`` or ``\"cuda:N\"`` (the device of the tensors it serves).")
      .def_prop_ro("step", [](const phase_state& s) -> std::uint64_t {
        if (s.dev) return s.dev->read(current_stream(s.device)).step;
        return std::visit([](const auto& x) -> std::uint64_t { return x.step; }, s.st);
      }, "Steps finished (:meth:`PhaseCodec.finish_step` calls; on a CUDA device, reading it waits for the device).")
      .def_prop_ro("residual", [](phase_state& s) -> nb::object {
        if (s.dev)
          return nb::cast(nb::ndarray<nb::pytorch, float, nb::ndim<1>>(s.dev->residual(), {std::get<gc::tagc::state>(s.st).size},
                                                                       nb::handle(), {}, nb::dtype<float>(),
                                                                       nb::device::cuda::value, s.device),
                        nb::rv_policy::reference);
        if (s.cast) {
          float* e = s.cast->residual();
          return nb::cast(nb::ndarray<nb::pytorch, float, nb::ndim<1>>(e, {e ? std::get<gc::summable::rank_state>(s.st).size : 0},
                                                                       nb::handle(), {}, nb::dtype<float>(),
                                                                       nb::device::cuda::value, s.device),
                          nb::rv_policy::reference);
        }
        return std::visit([](auto& x) { return nb::cast(float_view(x.residual), nb::rv_policy::reference); }, s.st);
      }, nb::keep_alive<0, 1>(),
         "The error-feedback residual, ``size`` float32 elements, no copy: a NumPy view of a CPU state (empty "
         "without feedback), a CUDA tensor on the state's device for a device state.")
      .def_prop_ro("thresholds", [](phase_state& s) -> nb::object {
        static std::vector<float> none;
        if (s.dev)
          return nb::cast(nb::ndarray<nb::pytorch, float, nb::ndim<1>>(s.dev->thresholds(), {std::get<gc::tagc::state>(s.st).world},
                                                                       nb::handle(), {}, nb::dtype<float>(),
                                                                       nb::device::cuda::value, s.device),
                        nb::rv_policy::reference);
        auto* t = std::get_if<gc::tagc::state>(&s.st);
        return nb::cast(float_view(t ? t->thresholds : none), nb::rv_policy::reference);
      }, nb::keep_alive<0, 1>(),
         "TAGC: each shard's last ``|x|`` selection threshold (a view, or a CUDA tensor for a device state); empty for "
         "casts.")
      .def_prop_ro("rows", [](const phase_state& s) {
        if (s.dev) return s.dev->read(current_stream(s.device)).rows;
        const auto* t = std::get_if<gc::tagc::state>(&s.st);
        return t ? t->rows : 0u;
      }, "TAGC: sketch blocks per shard of this step (known after ``receive(0, ...)``; on a CUDA device, reading it "
         "waits for the device); 0 for casts.")
      .def_prop_ro("stats", [](const phase_state& s) {
        if (s.dev) {
          const auto r = s.dev->read(current_stream(s.device));
          return std::make_tuple(r.items, r.peeled, r.rounds);
        }
        const auto* t = std::get_if<gc::tagc::state>(&s.st);
        return t ? std::make_tuple(t->stats.items, t->stats.peeled, t->stats.rounds) : std::make_tuple(0u, 0u, 0u);
      }, "TAGC: ``(items, peeled, rounds)`` of the last ``receive(1, ...)``: union items in this rank's part, how "
         "many peeled, peeling rounds; zeros for casts. On a CUDA device, reading it waits for the device.")
      .def_prop_ro("device_bytes", [](const phase_state& s) -> std::size_t {
        return s.dev ? s.dev->memory_bytes() : s.cast ? s.cast->memory_bytes() : 0;
      },
                   "Device memory the state holds (state, a step's workspace, its error word); 0 for a CPU state.")
      .def("__repr__", [](const phase_state& s) {
        return std::visit([&](const auto& x) {
          const auto kind = s.owner.substr(0, s.owner.find(':', s.owner.starts_with("cast:") ? 5 : 0));
          std::string r = "gradcomp.PhaseState(codec='" + kind + "', size=" + std::to_string(x.size) + ", world=" +
                          std::to_string(x.world) + ", rank=" + std::to_string(x.rank);
          if (s.dev) return r + ", device='" + device_name(s.device) + "')";
          if (s.cast) r += ", device='" + device_name(s.device) + "'";
          r += ", step=" + std::to_string(x.step);
          if (const auto* t = std::get_if<gc::tagc::state>(&s.st)) r += ", rows=" + std::to_string(t->rows);
          return r + ")";
        }, s.st);
      });

  nb::class_<phase_codec>(m, "PhaseCodec",
      "A summable codec: its buffers may be reduced element-wise by the transport, in phases.\n\n"
      "Made by :func:`Tagc` or :func:`SummableCast`. A step runs, for each phase ``k`` in\n"
      "``range(phase_count)``: :meth:`describe` (type, reduction, count), :meth:`encode` into a buffer of\n"
      "that type, the transport's reduction (``all_reduce``, or ``reduce_scatter_tensor`` for a\n"
      "shardable phase), :meth:`receive` of the reduced buffer; then :meth:`finish_step`. Phase buffers:\n"
      "int32 for ``\"u32\"`` words, bfloat16 / float32 / float16 for cells.\n\n"
      "Example::\n\n"
      "    >>> codec = gradcomp.Tagc()\n"
      "    >>> st = codec.make_state(g.numel(), world, rank)\n"
      "    >>> bits = torch.empty(codec.describe(0, st)[\"count\"], dtype=torch.int32)\n"
      "    >>> codec.encode(0, g, st, bits); dist.all_reduce(bits, op=dist.ReduceOp.BOR)\n"
      "    >>> codec.receive(0, st, bits)\n"
      "    >>> cells = torch.empty(codec.describe(1, st)[\"count\"], dtype=torch.bfloat16)\n"
      "    >>> codec.encode(1, g, st, cells); dist.all_reduce(cells)\n"
      "    >>> codec.receive(1, st, cells, out); codec.finish_step(st)")
      .def_prop_ro("phase_count", [](const phase_codec& pc) {
        return std::visit([](const auto& c) { return c.phase_count(); }, pc.c);
      }, "Phases per step (TAGC: 2, bitmap and sketch; casts: 1).")
      .def_prop_ro("identity", [](const phase_codec& pc) { return pc.identity; },
                   "The codec and configuration as a string; states and checkpoints carry it.")
      .def_prop_ro("config", [](const phase_codec& pc) {
        if (const auto* t = std::get_if<gc::tagc::codec>(&pc.c)) return to_dict(tagc_options(t->get_config()));
        return nb::dict();
      }, "TAGC: every option with its effective value (as :func:`Tagc` takes them); empty for casts.")
      .def("make_state", [](const phase_codec& pc, std::size_t n, std::uint32_t world, std::uint32_t rank,
                            nb::handle device) {
        const int dev = device.is_none() ? -1 : parse_device(device);
        if (dev >= 0) {
          if (!cuda_build_info().cuda) raise(gc::errc::device_error, "this build of gradcomp has no CUDA support");
          cuda_check_device(dev);
          const auto* t = std::get_if<gc::tagc::codec>(&pc.c);
          if (!t) {
            if (world == 0 || rank >= world) raise({gc::errc::invalid_argument, "state needs world >= 1 and rank < world"});
            return std::visit([&](const auto& c) {
              using C = std::remove_cvref_t<decltype(c)>;
              if constexpr (std::is_same_v<C, gc::tagc::codec>) {
                return phase_state{};  // not reached: TAGC is handled below
              } else {
                std::shared_ptr<device_cast> d = make_device_cast(wire_of(c), c.get_config().feedback, n, current_stream(dev));
                pc.checks->add(d);
                return phase_state{c.make_state(n, world, rank), pc.identity, dev, nullptr, std::move(d)};
              }
            }, pc.c);
          }
          gc::tagc::state meta;  // size, world and rank: the device state holds the rest
          meta.size = n;
          meta.world = world;
          meta.rank = rank;
          std::shared_ptr<device_tagc> d = make_device_tagc(t->get_config(), n, world, rank, current_stream(dev));
          pc.checks->add(d);
          return phase_state{std::move(meta), pc.identity, dev, std::move(d)};
        }
        return std::visit([&](const auto& c) {
          using C = std::remove_cvref_t<decltype(c)>;
          if constexpr (std::is_same_v<C, gc::tagc::codec>) {
            gc::tagc::state st;
            check(c.make_state(n, world, rank, st));
            return phase_state{std::move(st), pc.identity};
          } else {
            if (world == 0 || rank >= world) raise({gc::errc::invalid_argument, "state needs world >= 1 and rank < world"});
            return phase_state{c.make_state(n, world, rank), pc.identity};
          }
        }, pc.c);
      }, nb::arg("n"), nb::arg("world"), nb::arg("rank"), nb::arg("device").none() = nb::none(),
         nb::sig("def make_state(self, n: int, world: int, rank: int, device: torch.device | str | int | None = None) -> PhaseState"),
         "A fresh state of one rank.\n\n"
         "Args:\n"
         "    n (int): buffer elements (the same on every rank).\n"
         "    world (int): ranks that reduce their buffers.\n"
         "    rank (int): this rank, ``0 <= rank < world``.\n"
         "    device (torch.device | str | int, optional): ``None`` or ``\"cpu\"`` for a CPU state; a CUDA device\n"
         "        for a state in that device's memory, which then takes CUDA tensors only. Its calls run on\n"
         "        ``torch.cuda.current_stream(device)`` without waiting for the device, and write the CPU's\n"
         "        bytes, except that TAGC's sketch phase is padded to its largest size (``describe(1)`` is\n"
         "        known before the union) and only each shard's first ``rows * block`` cells are the CPU's.\n\n"
         "Returns:\n"
         "    PhaseState: step 0, zero residual.\n\n"
         "Raises:\n"
         "    gradcomp.Error: ``world == 0`` or ``rank >= world``; a device without CUDA (``device_error``).")
      .def("describe", [](const phase_codec& pc, std::size_t k, phase_state& ps) { return describe_dict(describe(pc, k, ps)); },
           nb::arg("k"), nb::arg("state"),
           "Phase ``k`` of this step.\n\n"
           "Args:\n"
           "    k (int): the phase, ``0 <= k < phase_count``.\n"
           "    state (PhaseState): this rank's state.\n\n"
           "Returns:\n"
           "    dict: ``name``; ``type`` (``\"u32\"``, ``\"f32\"``, ``\"bf16\"``, ``\"f16\"``); ``op`` (``\"sum\"``,\n"
           "    ``\"max\"``, ``\"bor\"``); ``count`` (elements of the buffer); ``bytes``; ``shardable`` (a\n"
           "    reduce-scatter is enough); ``shard_count`` (elements of one rank's shard); ``world``;\n"
           "    ``headroom_bits``.\n\n"
           "Raises:\n"
           "    gradcomp.Error: a phase whose size is not known yet (TAGC's sketch before ``receive(0)``:\n"
           "        ``invalid_argument``), or a state of another codec (``codec_mismatch``).")
      .def("max_phase_bytes", [](const phase_codec& pc, phase_state& ps) {
        if (ps.dev) {
          describe(pc, 0, ps);  // the owner check
          return ps.dev->max_phase_bytes();
        }
        if (const auto* t = std::get_if<gc::tagc::codec>(&pc.c)) return t->max_phase_bytes(state_of<gc::tagc::state>(pc, ps));
        return describe(pc, 0, ps).bytes();
      }, nb::arg("state"), "The largest phase buffer of any step, in bytes (for buffers allocated once).")
      .def("encode", [](const phase_codec& pc, std::size_t k, in_array grad, phase_state& ps, out_array out) {
        const int device = call_device("encode", grad, out);
        check_call_device(ps, device, "encode");
        if (ps.dev || ps.cast) {
          const gc::summable::phase p = describe(pc, k, ps);
          const auto* g = reinterpret_cast<const float*>(device_data(grad, "grad", 0));
          std::byte* o = device_data(out, "out", p.element_bytes());
          const std::size_t bytes = out.size() * out.itemsize();
          const device_stream s = current_stream(device);
          if (ps.cast) {
            if (grad.size() != std::get<gc::summable::rank_state>(ps.st).size)
              raise({gc::errc::size_mismatch, "gradient differs from the state's size"});
            if (bytes != p.bytes()) raise({gc::errc::size_mismatch, "phase buffer differs from describe().bytes()"});
          }
          nb::gil_scoped_release unlocked;
          if (ps.cast) ps.cast->encode(g, grad.size(), o, p.count, s);
          else ps.dev->encode(k, g, grad.size(), o, bytes, s);
          return;
        }
        const auto g = float_span(grad, "grad");
        const gc::summable::phase p = describe(pc, k, ps);
        const auto o = phase_bytes(out, "out", p.element_bytes());
        nb::gil_scoped_release unlocked;
        std::visit([&](const auto& c) {
          using C = std::remove_cvref_t<decltype(c)>;
          check(c.encode(k, g, state_of<typename C::state_type>(pc, ps), o));
        }, pc.c);
      }, nb::arg("k"), nb::arg("grad").noconvert(), nb::arg("state"), nb::arg("out").noconvert(),
         nb::sig("def encode(self, k: int, grad: torch.Tensor, state: PhaseState, out: torch.Tensor) -> None"),
         "Fills ``out`` with phase ``k`` of ``grad``.\n\n"
         "Args:\n"
         "    k (int): the phase.\n"
         "    grad (torch.Tensor): float32, ``state.size`` elements (read only).\n"
         "    state (PhaseState): this rank's state.\n"
         "    out (torch.Tensor): ``describe(k, state)[\"count\"]`` elements of the phase's type (int32 for\n"
         "        ``\"u32\"``, bfloat16 / float32 / float16 cells).\n\n"
         "Raises:\n"
         "    TypeError: a dtype that does not match the phase's type.\n"
         "    gradcomp.Error: a wrong size (``size_mismatch``), a call out of order, a state of another codec.")
      .def("receive", [](const phase_codec& pc, std::size_t k, phase_state& ps, in_array reduced, nb::handle out) {
        std::optional<out_array> o_arr;
        if (!out.is_none()) o_arr = nb::cast<out_array>(out);
        const int device = o_arr ? call_device("receive", reduced, *o_arr) : call_device("receive", reduced);
        check_call_device(ps, device, "receive");
        if (ps.dev || ps.cast) {
          const gc::summable::phase p = describe(pc, k, ps);
          const std::byte* in = device_data(reduced, "reduced", p.element_bytes());
          float* o = o_arr ? reinterpret_cast<float*>(device_data(*o_arr, "out", 0)) : nullptr;
          const std::size_t on = o_arr ? o_arr->size() : 0;
          const std::size_t bytes = reduced.size() * reduced.itemsize();
          const device_stream s = current_stream(device);
          if (ps.cast) {
            // summable::cast::receive's size checks, on the host; the padding is checked on the device.
            const auto& st = std::get<gc::summable::rank_state>(ps.st);
            const auto got = gc::summable::classify(p, bytes);
            if (!got) raise(got.error());
            const bool whole = *got == gc::summable::received::whole;
            const std::size_t count = whole ? st.size : gc::summable::shard_of(st.size, st.world, st.rank).count;
            if (on != count) raise({gc::errc::size_mismatch, "output differs from the received range"});
            nb::gil_scoped_release unlocked;
            ps.cast->receive(in, whole ? p.count : p.shard_count(), o, count, s);
            return;
          }
          nb::gil_scoped_release unlocked;
          ps.dev->receive(k, in, bytes, o, on, s);
          return;
        }
        const gc::summable::phase p = describe(pc, k, ps);
        const auto in = phase_bytes(reduced, "reduced", p.element_bytes());
        std::span<float> o;
        if (!out.is_none()) o = float_span(nb::cast<out_array>(out), "out");
        nb::gil_scoped_release unlocked;
        std::visit([&](const auto& c) {
          using C = std::remove_cvref_t<decltype(c)>;
          check(c.receive(k, state_of<typename C::state_type>(pc, ps), in, o));
        }, pc.c);
      }, nb::arg("k"), nb::arg("state"), nb::arg("reduced").noconvert(), nb::arg("out").none() = nb::none(),
         nb::sig("def receive(self, k: int, state: PhaseState, reduced: torch.Tensor, out: torch.Tensor | None = None) -> None"),
         "Takes phase ``k``'s reduced buffer; the last phase decodes into ``out``.\n\n"
         "Everything is checked before anything is written.\n\n"
         "Args:\n"
         "    k (int): the phase.\n"
         "    state (PhaseState): this rank's state.\n"
         "    reduced (torch.Tensor): the whole reduced buffer, or this rank's shard of a shardable phase.\n"
         "    out (torch.Tensor, optional): float32; the last phase writes the decoded sum there (``n``\n"
         "        values, or the shard's values when ``reduced`` is the shard).\n\n"
         "Raises:\n"
         "    gradcomp.Error: a wrong size, a call out of order, a state of another codec.")
      .def("finish_step", [](const phase_codec& pc, phase_state& ps) {
        if (ps.dev) {
          describe(pc, 0, ps);  // the owner check
          ps.dev->finish_step(current_stream(ps.device));
          pc.checks->stepped();
          return;
        }
        std::visit([&](const auto& c) {
          using C = std::remove_cvref_t<decltype(c)>;
          c.finish_step(state_of<typename C::state_type>(pc, ps));
        }, pc.c);
        if (ps.cast) pc.checks->stepped();
      }, nb::arg("state"),
         "Ends the step (advances ``state.step``); call it after the last :meth:`receive`.\n\n"
         "For a device state, every ``check_interval``-th call (of all this codec's device states) runs\n"
         ":meth:`check`.")
      .def("check", [](const phase_codec& pc) { pc.checks->check(); },
           "Raises the first error the device found in a step of any of this codec's device states since\n"
           "the last check, and clears them all.\n\n"
           "A device state's step finds bad reduced buffers on the device, where the host does not wait for\n"
           "them: that step's later calls then do nothing (no cells, residual unchanged, output untouched),\n"
           "and the error is kept until a check. Waits for the devices. Nothing to do for CPU states, whose\n"
           "calls raise at once.\n\n"
           "Raises:\n"
           "    gradcomp.Error: the first error reported (``index_out_of_range``, ``count_too_large``, ...).")
      .def_prop_rw("check_interval", [](const phase_codec& pc) { return pc.checks->interval; },
                   [](const phase_codec& pc, std::uint64_t v) { pc.checks->interval = v; },
                   "Device states: :meth:`finish_step` runs :meth:`check` every this many calls (default 256; 0:\n"
                   "only on demand).")
      .def("checkpoint", [](const phase_codec& pc, phase_state& ps) {
        const auto& c = tagc_of(pc);
        gc::tagc::state copy;
        if (ps.dev) {
          describe(pc, 0, ps);  // the owner check
          copy = host_copy(c, ps, true);
        }
        const auto& st = ps.dev ? copy : state_of<gc::tagc::state>(pc, ps);
        std::string bytes(gc::tagc::checkpoint_bytes(st), '\0');
        const auto r = gc::tagc::save_checkpoint(c, st, std::as_writable_bytes(std::span(bytes)));
        if (!r) raise(r.error());
        return nb::bytes(bytes.data(), bytes.size());
      }, nb::arg("state"),
         "TAGC: the state's checkpoint.\n\n"
         "Returns:\n"
         "    bytes: residual, thresholds, step and sampling key, with the configuration's identity and a CRC32C.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a summable cast (casts keep no state across steps).")
      .def("load_checkpoint", [](const phase_codec& pc, phase_state& ps, nb::bytes b) {
        const auto& c = tagc_of(pc);
        const std::span<const std::byte> data{static_cast<const std::byte*>(b.data()), b.size()};
        restore_tagc(pc, ps, [&](gc::tagc::state& st) { return gc::tagc::load_checkpoint(c, data, st); });
      }, nb::arg("state"), nb::arg("data"),
         "TAGC: restores :meth:`checkpoint` bytes of the same world size and rank into ``state``.\n\n"
         "Raises:\n"
         "    gradcomp.Error: corrupted bytes (``checksum_mismatch``, ...), another configuration, world size\n"
         "        or rank; the state is unchanged then.")
      .def("restore_elastic", [](const phase_codec& pc, phase_state& ps, const std::vector<nb::bytes>& saved) {
        const auto& c = tagc_of(pc);
        std::vector<std::span<const std::byte>> views;
        for (const nb::bytes& b : saved) views.emplace_back(static_cast<const std::byte*>(b.data()), b.size());
        restore_tagc(pc, ps, [&](gc::tagc::state& st) { return gc::tagc::restore_elastic(c, views, st); });
      }, nb::arg("state"), nb::arg("saved"),
         "TAGC: restores this rank from the checkpoints of every rank of a run of any world size.\n\n"
         "The residuals' sum over the saved ranks is kept, re-sliced by the new shards: ``state`` holds its\n"
         "shard of the sum and zeros elsewhere.\n\n"
         "Args:\n"
         "    state (PhaseState): a fresh state of this rank in the new world.\n"
         "    saved (Sequence[bytes]): :meth:`checkpoint` of every saved rank, in rank order.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a corrupted or missing checkpoint, another configuration.")
      .def("__repr__", [](const phase_codec& pc) { return pc.label; });

  m.def("Tagc", [](const std::string& preset, nb::kwargs kw) { return make_tagc(preset, kw); }, nb::arg("preset") = "default",
        nb::arg("config"),
        "TAGC-2: a :class:`PhaseCodec` with two phases, a bitmap of kept positions and a count sketch.\n\n"
        "Args:\n"
        "    preset (str): ``\"default\"`` (adaptive sketch), ``\"tagc2\"`` (ratio 10) or ``\"v1\"``.\n"
        "    **config: ``density``, ``estimate`` (``\"dgc\"``, ``\"tagc\"``), ``sample_fraction``, ``min_ratio``,\n"
        "        ``max_ratio``, ``max_tries``, ``block``, ``sizing`` (``\"ratio\"``, ``\"adaptive\"``), ``ratio``,\n"
        "        ``cells_per_item``, ``cells`` (``\"bf16\"``, ``\"fp32\"``), ``bitmap`` (``\"or\"``, ``\"sum_safe\"``),\n"
        "        ``max_rounds``, ``seed``; :attr:`PhaseCodec.config` gives them back.\n\n"
        "Returns:\n"
        "    PhaseCodec: the codec.\n\n"
        "Raises:\n"
        "    gradcomp.Error: an unknown preset or option, or an invalid configuration.");
  m.def("SummableCast", &make_cast, nb::arg("wire") = "bf16", nb::arg("feedback") = true,
        "A summable cast: values cast to ``wire`` and summed by the transport, in one phase.\n\n"
        "Args:\n"
        "    wire (str): ``\"fp32\"``, ``\"bf16\"`` (default) or ``\"fp16\"``.\n"
        "    feedback (bool): keep the cast's rounding error as a residual for the next step (default True).\n\n"
        "Returns:\n"
        "    PhaseCodec: the codec.\n\n"
        "Raises:\n"
        "    gradcomp.Error: an unknown wire type.");
}

}  // namespace gradcomp_py
