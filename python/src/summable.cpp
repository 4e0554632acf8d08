// Summable codecs with phases (summable/phases.hpp): TAGC-2 (tagc::codec) and the summable
// casts (summable::cast<Q>), as gradcomp.Tagc and gradcomp.SummableCast, over backend.hpp's
// summable family (summable_codecs.cpp, device_phases.cu). Python runs the
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
#include <vector>

#include "arrays.hpp"

namespace gradcomp_py {

namespace {

struct phase_state {
  std::shared_ptr<summable_state> st;  // on the CPU or a CUDA device
  std::string owner;                   // the codec (and config) that made it
};

struct phase_codec {
  std::unique_ptr<summable_codec> c;
  std::string identity;
  options config;     // TAGC's options; none for casts
  bool checkpoints;   // TAGC
  std::string label;  // repr: how it was made and its key configuration
  std::shared_ptr<device_checks> checks = std::make_shared<device_checks>();
};

summable_state& state_of(const phase_codec& pc, const phase_state& ps) {
  if (ps.owner != pc.identity) raise({gc::errc::codec_mismatch, "state made by another codec or configuration"});
  return *ps.st;
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

// The state's device must be the call's arrays' (-1: the CPU).
void check_call_device(const summable_state& st, int device, const char* call) {
  if (st.device() != device)
    throw nb::value_error((std::string(call) + ": the state is on " + device_name(st.device()) + ", the arrays are on " +
                           device_name(device) + " (PhaseCodec.make_state(n, world, rank, device=...))")
                              .c_str());
}

// Checkpoints: TAGC's states only (before the state is looked at).
summable_state& checkpointed(const phase_codec& pc, const phase_state& ps) {
  if (!pc.checkpoints)
    raise({gc::errc::invalid_argument, "only TAGC states have checkpoints (summable casts keep no state across steps)"});
  return state_of(pc, ps);
}

phase_codec make_tagc_codec(const std::string& preset, const nb::kwargs& kw) {
  summable_made made = make_tagc(preset, to_options(kw));
  const nb::dict cfg = to_dict(made.config);
  std::string label = "gradcomp.Tagc('" + preset + "'";
  for (const char* key : {"density", "sizing", "block", "bitmap", "cells"})
    label += std::string(", ") + key + "=" + nb::cast<std::string>(nb::repr(cfg[key]));
  return {std::move(made.codec), std::move(made.identity), std::move(made.config), made.checkpoints, label + ")"};
}

phase_codec make_cast_codec(const std::string& wire, bool feedback) {
  const auto made = [&](gc::summable::wire_type t, const char* w) -> phase_codec {
    summable_made c = make_cast(t, feedback);
    return {std::move(c.codec), std::move(c.identity), std::move(c.config), c.checkpoints,
            std::string("gradcomp.SummableCast('") + w + "', feedback=" + (feedback ? "True" : "False") + ")"};
  };
  if (wire == "fp32" || wire == "float32") return made(gc::summable::wire_type::f32, "fp32");
  if (wire == "bf16" || wire == "bfloat16") return made(gc::summable::wire_type::bf16, "bf16");
  if (wire == "fp16" || wire == "float16") return made(gc::summable::wire_type::f16, "fp16");
  bad_option("wire", "must be 'fp32', 'bf16' or 'fp16'");
}

}  // namespace

void bind_summable(nb::module_& m) {
  nb::class_<phase_state>(m, "PhaseState",
      "One rank's state of a :class:`PhaseCodec`: residual, thresholds, step.\n\n"
      "Made by :meth:`PhaseCodec.make_state` for a buffer of a fixed size, world size and rank; only the codec\n"
      "(and configuration) that made it accepts it. Arrays are NumPy views of the C++ state (no copies).")
      .def_prop_ro("size", [](const phase_state& s) { return s.st->size(); }, "Elements of the buffer the state serves.")
      .def_prop_ro("world", [](const phase_state& s) { return s.st->world(); }, "The world size (ranks summing their buffers).")
      .def_prop_ro("rank", [](const phase_state& s) { return s.st->rank(); }, "This rank (its shard of a shardable phase).")
      .def_prop_ro("device", [](const phase_state& s) { return device_name(s.st->device()); },
                   "Where the state lives: ``\"cpu\"`` or ``\"cuda:N\"`` (the device of the tensors it serves).")
      .def_prop_ro("step", [](const phase_state& s) { return s.st->read(stream_of(s.st->device())).step; },
                   "Steps finished (:meth:`PhaseCodec.finish_step` calls; on a CUDA device, reading it waits for the device).")
      .def_prop_ro("residual", [](phase_state& s) { return float_array(s.st->residual()); }, nb::keep_alive<0, 1>(),
         "The error-feedback residual, ``size`` float32 elements, no copy: a NumPy view of a CPU state (empty "
         "without feedback), a CUDA tensor on the state's device for a device state.")
      .def_prop_ro("thresholds", [](phase_state& s) { return float_array(s.st->thresholds()); }, nb::keep_alive<0, 1>(),
         "TAGC: each shard's last ``|x|`` selection threshold (a view, or a CUDA tensor for a device state); empty for "
         "casts.")
      .def_prop_ro("rows", [](const phase_state& s) { return s.st->read(stream_of(s.st->device())).rows; },
                   "TAGC: sketch blocks per shard of this step (known after ``receive(0, ...)``; on a CUDA device, reading it "
                   "waits for the device); 0 for casts.")
      .def_prop_ro("stats", [](const phase_state& s) {
        const summable_state::report r = s.st->read(stream_of(s.st->device()));
        return std::make_tuple(r.items, r.peeled, r.rounds);
      }, "TAGC: ``(items, peeled, rounds)`` of the last ``receive(1, ...)``: union items in this rank's part, how "
         "many peeled, peeling rounds; zeros for casts. On a CUDA device, reading it waits for the device.")
      .def_prop_ro("device_bytes", [](const phase_state& s) { return s.st->device_bytes(); },
                   "Device memory the state holds (state, a step's workspace, its error word); 0 for a CPU state.")
      .def("__repr__", [](const phase_state& s) {
        const summable_state& x = *s.st;
        const auto kind = s.owner.substr(0, s.owner.find(':', s.owner.starts_with("cast:") ? 5 : 0));
        std::string r = "gradcomp.PhaseState(codec='" + kind + "', size=" + std::to_string(x.size()) + ", world=" +
                        std::to_string(x.world()) + ", rank=" + std::to_string(x.rank());
        if (x.device() >= 0) r += ", device='" + device_name(x.device()) + "'";
        // What the host knows without waiting for the device.
        if (const auto known = x.known()) {
          r += ", step=" + std::to_string(known->step);
          if (kind == "tagc") r += ", rows=" + std::to_string(known->rows);
        }
        return r + ")";
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
      .def_prop_ro("phase_count", [](const phase_codec& pc) { return pc.c->phase_count(); },
                   "Phases per step (TAGC: 2, bitmap and sketch; casts: 1).")
      .def_prop_ro("identity", [](const phase_codec& pc) { return pc.identity; },
                   "The codec and configuration as a string; states and checkpoints carry it.")
      .def_prop_ro("config", [](const phase_codec& pc) { return to_dict(pc.config); },
                   "TAGC: every option with its effective value (as :func:`Tagc` takes them); empty for casts.")
      .def("make_state", [](const phase_codec& pc, std::size_t n, std::uint32_t world, std::uint32_t rank,
                            nb::handle device) {
        const int where = device.is_none() ? -1 : parse_device(device);
        phase_state s{pc.c->make_state(n, world, rank, placement(where)), pc.identity};
        pc.checks->add(s.st);
        return s;
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
      .def("describe", [](const phase_codec& pc, std::size_t k, phase_state& ps) {
        return describe_dict(state_of(pc, ps).describe(*pc.c, k));
      }, nb::arg("k"), nb::arg("state"),
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
      .def("max_phase_bytes", [](const phase_codec& pc, phase_state& ps) { return state_of(pc, ps).max_phase_bytes(*pc.c); },
           nb::arg("state"), "The largest phase buffer of any step, in bytes (for buffers allocated once).")
      .def("encode", [](const phase_codec& pc, std::size_t k, in_array grad, phase_state& ps, out_array out) {
        summable_state& st = state_of(pc, ps);
        const int device = call_device("encode", grad, out);
        check_call_device(st, device, "encode");
        const gc::summable::phase p = st.describe(*pc.c, k);
        const auto g = floats_of(grad, "grad");
        const auto o = phase_view(out, "out", p.element_bytes());
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        st.encode(*pc.c, k, g, o, s);
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
        summable_state& st = state_of(pc, ps);
        std::optional<out_array> o_arr;
        if (!out.is_none()) o_arr = nb::cast<out_array>(out);
        const int device = o_arr ? call_device("receive", reduced, *o_arr) : call_device("receive", reduced);
        check_call_device(st, device, "receive");
        const gc::summable::phase p = st.describe(*pc.c, k);
        const auto in = phase_view(reduced, "reduced", p.element_bytes());
        std::span<float> o;
        if (o_arr) o = floats_of(*o_arr, "out");
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        st.receive(*pc.c, k, in, o, s);
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
        summable_state& st = state_of(pc, ps);
        st.finish_step(*pc.c, stream_of(st.device()));
        pc.checks->stepped(st);
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
      .def("checkpoint", [](const phase_codec& pc, phase_state& ps) { return checkpoint_of(checkpointed(pc, ps), *pc.c); },
           nb::arg("state"),
         "TAGC: the state's checkpoint.\n\n"
         "Returns:\n"
         "    bytes: residual, thresholds, step and sampling key, with the configuration's identity and a CRC32C.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a summable cast (casts keep no state across steps).")
      .def("load_checkpoint", [](const phase_codec& pc, phase_state& ps, nb::bytes b) {
        load_from(checkpointed(pc, ps), *pc.c, b);
      }, nb::arg("state"), nb::arg("data"),
         "TAGC: restores :meth:`checkpoint` bytes of the same world size and rank into ``state``.\n\n"
         "Raises:\n"
         "    gradcomp.Error: corrupted bytes (``checksum_mismatch``, ...), another configuration, world size\n"
         "        or rank; the state is unchanged then.")
      .def("restore_elastic", [](const phase_codec& pc, phase_state& ps, const std::vector<nb::bytes>& saved) {
        restore_from(checkpointed(pc, ps), *pc.c, saved);
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

  m.def("Tagc", [](const std::string& preset, nb::kwargs kw) { return make_tagc_codec(preset, kw); }, nb::arg("preset") = "default",
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
  m.def("SummableCast", &make_cast_codec, nb::arg("wire") = "bf16", nb::arg("feedback") = true,
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
