// The sharded path (docs/sharded.md) for every registered compressor, as gradcomp.Sharded and
// gradcomp.ShardedState. Python runs the collectives: for each phase k, describe(k, state)
// gives the collective (all_to_all or all_gather) and the slot size; encode(k, grad, state,
// send) fills the caller's uint8 tensor; the caller runs the collective (all_to_all_single
// with equal splits, all_gather_into_tensor) and hands what it received to receive(k, state,
// received, out). Every array is used in place; the GIL is released while the library works.

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
#include "sharded.hpp"

namespace gradcomp_py {

namespace {

struct sharded_state_box {
  std::shared_ptr<sharded_state> st;  // on the CPU or a CUDA device
  std::string codec;  // the codec's name and mode, for repr
  std::string mode;
};

struct sharded_box {
  std::string name;
  std::unique_ptr<codec> comp;
  std::unique_ptr<sharded_codec> impl;
  std::string mode;
  std::string given;  // the keyword options as passed, for repr
  std::string identity;
  bool kernels = false;  // checked on first use on a CUDA device
  std::shared_ptr<device_checks> checks = std::make_shared<device_checks>();

  void check_kernels() {
    if (kernels) return;
    if (!cuda_build_info().cuda) raise(gc::errc::device_error, "this build of gradcomp has no CUDA support");
    if (!comp->make_device(std::make_shared<device_context>()))
      raise(gc::errc::invalid_argument, "codec '" + name + "' has no CUDA kernels (threshold, random-k and AccTFM's "
                                        "row top-k select on the CPU only): pass CPU tensors");
    kernels = true;
  }
};

// The state's device must be the call's arrays' (-1: the CPU).
void check_call_device(const sharded_state& s, int device, const char* call) {
  if (s.device() != device)
    throw nb::value_error((std::string(call) + ": the state is on " + device_name(s.device()) + ", the arrays are on " +
                           device_name(device) + " (Sharded.make_state(n, world, rank, dtype, device=...))")
                              .c_str());
}

gc::sharded::mode parse_mode(const std::string& m) {
  if (m == "all_reduce") return gc::sharded::mode::all_reduce;
  if (m == "reduce_scatter") return gc::sharded::mode::reduce_scatter;
  throw codec_error(gc::errc::invalid_argument, "mode must be 'all_reduce' or 'reduce_scatter', not '" + m + "'");
}

sharded_state& state_of(const sharded_box& c, const sharded_state_box& s) {
  if (s.st->identity != c.identity)
    throw codec_error(gc::errc::codec_mismatch, "sharded state made by another codec, configuration or mode (" +
                                                    s.st->identity + ", not " + c.identity + ")");
  return *s.st;
}

const char* dtype_name(gc::dtype t) { return t == gc::dtype::f32 ? "float32" : "bfloat16"; }

const char* stage_name(gc::sharded::stage s) {
  switch (s) {
    case gc::sharded::stage::encode_scatter: return "encode(0)";
    case gc::sharded::stage::receive_scatter: return "receive(0)";
    case gc::sharded::stage::encode_gather: return "encode(1)";
    case gc::sharded::stage::receive_gather: return "receive(1)";
  }
  return "unknown";
}

nb::dict describe_dict(const gc::sharded::phase& p) {
  nb::dict d;
  d["name"] = p.name;
  d["collective"] = p.op == gc::sharded::collective::all_to_all ? "all_to_all" : "all_gather";
  d["slot_bytes"] = p.slot_bytes;
  d["world"] = p.world;
  d["send_bytes"] = p.send_bytes();
  d["receive_bytes"] = p.receive_bytes();
  // What a rank puts on the wire: W - 1 slots, to the other ranks (all-to-all) or forwarded
  // around a ring (all-gather).
  d["wire_bytes"] = (p.world - 1) * p.slot_bytes;
  return d;
}

}  // namespace

void bind_sharded(nb::module_& m) {
  nb::class_<sharded_state_box>(m, "ShardedState",
      "One rank's state of a :class:`Sharded` codec: a compressor state per destination shard, the owner's\n"
      "state of its reduced shard (all-reduce mode), the step and where the rank is within it.\n\n"
      "Made by :meth:`Sharded.make_state` for gradients of a fixed size and element type, a world size and a\n"
      "rank; only the codec (name, configuration and mode) that made it accepts it.")
      .def_prop_ro("size", [](const sharded_state_box& s) { return s.st->size(); }, "Elements of the gradient the state serves.")
      .def_prop_ro("world", [](const sharded_state_box& s) { return s.st->world(); }, "The world size (ranks, and shards).")
      .def_prop_ro("rank", [](const sharded_state_box& s) { return s.st->rank(); }, "This rank: the owner of shard ``rank``.")
      .def_prop_ro("step", [](const sharded_state_box& s) { return s.st->step(stream_of(s.st->device())); },
                   "Steps finished (a step ends with ``receive(0)`` in reduce-scatter mode, ``receive(1)`` in all-reduce mode;\n"
                   "on a CUDA device, reading it waits for the device).")
      .def_prop_ro("device", [](const sharded_state_box& s) { return device_name(s.st->device()); },
                   "Where the state lives: ``\"cpu\"`` or ``\"cuda:N\"`` (the device of the tensors it serves).")
      .def_prop_ro("device_bytes", [](const sharded_state_box& s) { return s.st->device_bytes(); },
                   "Device memory the state holds (states, a call's workspace, its error word); 0 for a CPU state.")
      .def_prop_ro("dtype", [](const sharded_state_box& s) { return dtype_name(s.st->grad_type); },
                   "The gradients' element type, ``\"float32\"`` or ``\"bfloat16\"`` (it sizes phase 0's slots).")
      .def_prop_ro("stage", [](const sharded_state_box& s) { return stage_name(s.st->at()); },
                   "The call the state expects next: ``\"encode(0)\"``, ``\"receive(0)\"``, ``\"encode(1)\"`` or\n"
                   "``\"receive(1)\"``.")
      .def_prop_ro("shard", [](const sharded_state_box& s) {
        const gc::chunk_range r = gc::summable::shard_of(s.st->size(), s.st->world(), s.st->rank());
        return std::make_tuple(r.offset, r.count);
      }, "``(offset, count)`` of this rank's shard: ``count = min(n, (rank + 1) * ceil(n / world)) - offset``.")
      .def("sender_residual", [](sharded_state_box& s, std::uint32_t shard) { return float_array(s.st->sender_residual(shard)); },
           nb::arg("shard"), nb::keep_alive<0, 1>(),
           "What this rank still owes destination shard ``shard`` (its error-feedback residual there).\n\n"
           "Args:\n"
           "    shard (int): ``0 <= shard < world``.\n\n"
           "Returns:\n"
           "    numpy.ndarray | torch.Tensor: a float32 view of the state's memory (no copy; writable), the\n"
           "    shard's size, or empty without error feedback; a CUDA tensor for a device state.\n\n"
           "Raises:\n"
           "    gradcomp.Error: ``shard >= world`` (``invalid_argument``).")
      .def_prop_ro("owner_residual", [](sharded_state_box& s) { return float_array(s.st->owner_residual()); },
                   nb::keep_alive<0, 1>(),
                   "What the owner's re-encoding of its reduced shard still owes (all-reduce mode), a float32 NumPy view\n"
                   "of this rank's shard size (no copy; writable); empty in reduce-scatter mode or without error feedback.")
      .def("__repr__", [](const sharded_state_box& s) {
        const sharded_state& x = *s.st;
        // A device state's step would wait for the device.
        return "gradcomp.ShardedState(codec='" + s.codec + "', mode='" + s.mode + "', size=" + std::to_string(x.size()) +
               ", world=" + std::to_string(x.world()) + ", rank=" + std::to_string(x.rank()) + ", dtype='" +
               dtype_name(x.grad_type) + "'" +
               (x.device() >= 0 ? ", device='" + device_name(x.device()) + "')"
                                : ", step=" + std::to_string(x.step({})) + ", stage='" + stage_name(x.at()) + "')");
      });

  nb::class_<sharded_box>(m, "Sharded",
      "A compressor of :func:`codecs` on the sharded path: a reduce-scatter or an all-reduce whose bytes per\n"
      "rank do not grow with the world size (docs/sharded.md).\n\n"
      "Phase 0 (``\"scatter\"``, an all-to-all): each rank compresses shard ``j`` of its gradient into slot ``j``\n"
      "of its send buffer (a fixed size, :meth:`describe`'s ``slot_bytes``); the transport delivers slot ``j``\n"
      "of every rank to rank ``j``; :meth:`receive` checks the W slots of this rank's shard and sums them in\n"
      "fp32, in rank order. A reduce-scatter ends there. Phase 1 (``\"gather\"``, an all-gather; all-reduce\n"
      "mode only): each rank compresses its reduced shard again, with error feedback of its own, into one\n"
      "slot; every rank decodes slot ``r`` into shard ``r``: the replicas are bit-identical. Shards are\n"
      "``[r * ceil(n / W), (r + 1) * ceil(n / W))`` (the last shorter; FSDP's flat layout).\n\n"
      "Args:\n"
      "    name (str): a codec from :func:`codecs` (``\"int8\"``, ``\"int4\"``, ``\"topk\"``, ``\"fp32\"``, ...).\n"
      "    mode (str): ``\"all_reduce\"`` (default; two phases) or ``\"reduce_scatter\"`` (phase 0 only).\n"
      "    **options: the codec's options, as for :class:`Compressor`. Each rank's compressor for shard ``j``\n"
      "        runs with a seed mixed from ``seed``, its rank and ``j``, so ranks draw independent numbers.\n\n"
      "Raises:\n"
      "    gradcomp.Error: an unknown codec, mode or option, or an invalid value (``invalid_argument``).\n\n"
      "Example::\n\n"
      "    >>> codec = gradcomp.Sharded(\"int8\")                      # all-reduce\n"
      "    >>> st = codec.make_state(g.numel(), world, rank)\n"
      "    >>> p0 = codec.describe(0, st)                             # all_to_all of W slots\n"
      "    >>> send = torch.empty(p0[\"send_bytes\"], dtype=torch.uint8)\n"
      "    >>> recv = torch.empty(p0[\"receive_bytes\"], dtype=torch.uint8)\n"
      "    >>> codec.encode(0, g, st, send); dist.all_to_all_single(recv, send)\n"
      "    >>> codec.receive(0, st, recv)                             # the sum of this rank's shard\n"
      "    >>> p1 = codec.describe(1, st)                             # all_gather of one slot\n"
      "    >>> send1 = torch.empty(p1[\"send_bytes\"], dtype=torch.uint8)\n"
      "    >>> recv1 = torch.empty(p1[\"receive_bytes\"], dtype=torch.uint8)\n"
      "    >>> codec.encode(1, None, st, send1); dist.all_gather_into_tensor(recv1, send1)\n"
      "    >>> codec.receive(1, st, recv1, out)                       # out = the whole sum")
      .def("__init__", [](sharded_box* self, const std::string& name, const std::string& mode, nb::kwargs kw) {
        const gc::sharded::mode md = parse_mode(mode);
        std::unique_ptr<codec> comp = make_codec(name, to_options(kw));
        std::unique_ptr<sharded_codec> impl = comp->make_sharded(md);
        const std::string identity = name + ":" + std::to_string(comp->codec_id()) + ":" + mode;
        new (self) sharded_box{name, std::move(comp), std::move(impl), mode, kwargs_repr(kw), identity};
      }, nb::arg("name"), nb::arg("mode") = "all_reduce", nb::arg("options"))
      .def_prop_ro("name", [](const sharded_box& c) { return c.name; }, "The compressor's name.")
      .def_prop_ro("mode", [](const sharded_box& c) { return c.mode; }, "``\"all_reduce\"`` or ``\"reduce_scatter\"``.")
      .def_prop_ro("phase_count", [](const sharded_box& c) { return c.impl->phase_count(); },
                   "Phases per step: 2 in all-reduce mode, 1 in reduce-scatter mode.")
      .def_prop_ro("codec_id", [](const sharded_box& c) { return c.comp->codec_id(); },
                   "The compressor's 32-bit identifier (in every frame header and checkpoint).")
      .def_prop_ro("identity", [](const sharded_box& c) { return c.identity; },
                   "Name, codec identifier and mode as a string; states carry it.")
      .def_prop_ro("error_feedback", [](const sharded_box& c) { return c.comp->error_feedback(); },
                   "True when the states carry error-feedback residuals (per destination shard, and the owner's).")
      .def_prop_ro("options", [](const sharded_box& c) { return to_dict(c.comp->effective_options()); },
                   "Every option of the compressor with its effective value (defaults included).")
      .def("make_state", [](sharded_box& c, std::size_t n, std::uint32_t world, std::uint32_t rank, nb::handle dtype,
                            nb::handle device) {
        std::unique_ptr<sharded_state> st = c.impl->make_state(n, world, rank);
        st->grad_type = dtype.is_none() ? gc::dtype::f32 : parse_dtype(dtype);
        st->identity = c.identity;
        const int where = device.is_none() ? -1 : parse_device(device);
        if (where >= 0) {
          c.check_kernels();
          st = c.impl->to_device(std::move(st), placement(where));
          if (!st) raise(gc::errc::device_error, "this build of gradcomp has no CUDA kernels for codec '" + c.name + "'");
        }
        sharded_state_box s{std::move(st), c.name, c.mode};
        c.checks->add(s.st);
        return s;
      }, nb::arg("n"), nb::arg("world"), nb::arg("rank"), nb::arg("dtype") = nb::none(), nb::arg("device").none() = nb::none(),
         nb::sig("def make_state(self, n: int, world: int, rank: int, dtype: torch.dtype | None = None, "
                 "device: torch.device | str | int | None = None) -> ShardedState"),
         "A fresh state of one rank.\n\n"
         "Args:\n"
         "    n (int): gradient elements (the same on every rank).\n"
         "    world (int): the ranks (and shards).\n"
         "    rank (int): this rank, ``0 <= rank < world``.\n"
         "    dtype (torch.dtype, optional): the gradients' type, ``torch.float32`` (default) or\n"
         "        ``torch.bfloat16`` (ranks may differ: a slot holds either).\n"
         "    device (torch.device | str | int, optional): ``None`` or ``\"cpu\"`` for a CPU state; a CUDA device\n"
         "        for a state in that device's memory (codecs of ``build_info()[\"cuda_codecs\"]``), which then\n"
         "        takes CUDA tensors only, queued on ``torch.cuda.current_stream(device)`` without waiting for\n"
         "        the device. Its slots are the CPU's bytes; a bad received slot is found on the device: the\n"
         "        call does nothing (output untouched) but the step advances, and :meth:`check` raises it.\n\n"
         "Returns:\n"
         "    ShardedState: step 0, zero residuals.\n\n"
         "Raises:\n"
         "    gradcomp.Error: ``world == 0`` or ``rank >= world`` (``invalid_argument``).\n"
         "    TypeError: another dtype.")
      .def("describe", [](const sharded_box& c, std::size_t k, sharded_state_box& s) {
        return describe_dict(state_of(c, s).describe(*c.impl, k));
      }, nb::arg("k"), nb::arg("state"),
         "Phase ``k``'s collective and buffer sizes (the same on every rank, every step).\n\n"
         "Args:\n"
         "    k (int): 0 (scatter) or, in all-reduce mode, 1 (gather).\n"
         "    state (ShardedState): this rank's state.\n\n"
         "Returns:\n"
         "    dict: ``name`` (``\"scatter\"``, ``\"gather\"``); ``collective`` (``\"all_to_all\"``: slot ``j`` of\n"
         "    the send buffer goes to rank ``j``; ``\"all_gather\"``: one slot per rank); ``slot_bytes`` (a\n"
         "    multiple of 8); ``world``; ``send_bytes`` (W slots for the all-to-all, one for the all-gather);\n"
         "    ``receive_bytes`` (W slots, slot ``r`` from rank ``r``); ``wire_bytes`` (``(W - 1) * slot_bytes``,\n"
         "    what the rank puts on the wire).\n\n"
         "Raises:\n"
         "    gradcomp.Error: ``k >= phase_count`` (``invalid_argument``), a state of another codec\n"
         "        (``codec_mismatch``).")
      .def("describe_size", [](const sharded_box& c, std::size_t k, std::size_t n, std::uint32_t world) {
        return describe_dict(c.impl->describe(k, n, world));
      }, nb::arg("k"), nb::arg("n"), nb::arg("world"),
         "Phase ``k``'s collective and buffer sizes for gradients of ``n`` elements at ``world`` ranks, without\n"
         "a state: what :meth:`describe` returns for any state that ``make_state(n, world, rank)`` makes (the\n"
         "sizes depend on neither the rank nor the gradients' type).\n\n"
         "Args:\n"
         "    k (int): 0 (scatter) or, in all-reduce mode, 1 (gather).\n"
         "    n (int): gradient elements.\n"
         "    world (int): the ranks (and shards).\n\n"
         "Returns:\n"
         "    dict: as :meth:`describe`.\n\n"
         "Raises:\n"
         "    gradcomp.Error: ``k >= phase_count`` or ``world == 0`` (``invalid_argument``), shards over\n"
         "        2^32 - 1 elements (``count_too_large``).")
      .def("encode", [](const sharded_box& c, std::size_t k, nb::handle grad, sharded_state_box& s, out_array out) {
        sharded_state& st = state_of(c, s);
        std::optional<in_array> a;
        if (k == 0) {
          if (grad.is_none()) throw nb::type_error("grad: phase 0 encodes the gradient (a float32 or bfloat16 tensor)");
          a = nb::cast<in_array>(grad);
        }
        const int device = a ? call_device("encode", *a, out) : call_device("encode", out);
        check_call_device(st, device, "encode");
        if (a) {
          check_contiguous(*a, "grad");
          if (grad_dtype(*a, "grad") != st.grad_type)
            throw nb::type_error((std::string("grad: the state was made for ") + dtype_name(st.grad_type) + " gradients").c_str());
        }
        const void* g = a ? a->data() : nullptr;
        const std::size_t n = a ? a->size() : 0;
        const auto o = payload_view(out, "out", device);
        const device_stream stream = stream_of(device);
        nb::gil_scoped_release unlocked;
        st.encode(*c.impl, k, g, n, o, stream);
      }, nb::arg("k"), nb::arg("grad").none(), nb::arg("state"), nb::arg("out").noconvert(),
         nb::sig("def encode(self, k: int, grad: torch.Tensor | None, state: ShardedState, out: torch.Tensor) -> None"),
         "Fills the send buffer of phase ``k``.\n\n"
         "Args:\n"
         "    k (int): 0: ``grad``'s W shards into W slots (slot ``j`` for rank ``j``); 1: this rank's reduced\n"
         "        shard, kept by ``receive(0, ...)``, into one slot (``grad`` unused, may be None).\n"
         "    grad (torch.Tensor | None): phase 0: the gradient, ``state.size`` values of ``state.dtype``\n"
         "        (read only).\n"
         "    state (ShardedState): this rank's state (its residuals are updated).\n"
         "    out (torch.Tensor): uint8, exactly ``describe(k, state)[\"send_bytes\"]`` long.\n\n"
         "Raises:\n"
         "    TypeError: ``grad`` missing or of another type than the state's, ``out`` not a byte array.\n"
         "    ValueError: an array is not contiguous or not on the CPU.\n"
         "    gradcomp.Error: a wrong size (``size_mismatch``), a call out of order (``invalid_argument``:\n"
         "        encode(0), receive(0)[, encode(1), receive(1)]), non-finite values (``non_finite_value``), a\n"
         "        state of another codec (``codec_mismatch``).")
      .def("receive", [](const sharded_box& c, std::size_t k, sharded_state_box& s, in_array received, nb::handle out) {
        sharded_state& st = state_of(c, s);
        std::optional<out_array> o_arr;
        if (!out.is_none()) o_arr = nb::cast<out_array>(out);
        const int device = o_arr ? call_device("receive", received, *o_arr) : call_device("receive", received);
        check_call_device(st, device, "receive");
        const auto in = payload_view(received, "received", device);
        void* o = nullptr;
        std::size_t n = 0;
        gc::dtype t = st.grad_type;
        if (o_arr) {
          check_contiguous(*o_arr, "out");
          t = grad_dtype(*o_arr, "out");
          o = const_cast<void*>(o_arr->data());
          n = o_arr->size();
        }
        const device_stream stream = stream_of(device);
        {
          nb::gil_scoped_release unlocked;
          st.receive(*c.impl, k, in, o, n, t, stream);
        }
        if (k + 1 == c.impl->phase_count()) c.checks->stepped(st);
      }, nb::arg("k"), nb::arg("state"), nb::arg("received").noconvert(), nb::arg("out").none() = nb::none(),
         nb::sig("def receive(self, k: int, state: ShardedState, received: torch.Tensor, out: torch.Tensor | None = None) -> None"),
         "Checks and decodes what phase ``k``'s collective delivered.\n\n"
         "Every slot is checked (tag, sender, shard, step, frames, zero padding) before anything is written;\n"
         "on error ``out`` is untouched, the state does not advance, and the call may be repeated.\n\n"
         "Args:\n"
         "    k (int): the phase.\n"
         "    state (ShardedState): this rank's state.\n"
         "    received (torch.Tensor): uint8, ``describe(k, state)[\"receive_bytes\"]`` long, 8-byte aligned:\n"
         "        slot ``r`` from rank ``r``.\n"
         "    out (torch.Tensor, optional): float32 or bfloat16. ``receive(0)``: this rank's reduced shard\n"
         "        (``state.shard[1]`` values) in reduce-scatter mode; None in all-reduce mode (the sum stays in\n"
         "        the state for ``encode(1)``). ``receive(1)``: the whole sum, ``state.size`` values.\n\n"
         "Raises:\n"
         "    TypeError: a dtype that is not float32 / bfloat16, ``received`` not a byte array.\n"
         "    ValueError: an array is not contiguous or not on the CPU.\n"
         "    gradcomp.Error: a corrupted or foreign slot (``bad_magic``, ``bad_header``, ``codec_mismatch``,\n"
         "        ``checksum_mismatch``, ``truncated``, ...), a wrong size (``size_mismatch``), a call out of\n"
         "        order (``invalid_argument``), a state of another codec (``codec_mismatch``).")
      .def("checkpoint", [](const sharded_box& c, sharded_state_box& s) { return checkpoint_of(state_of(c, s), *c.impl); },
           nb::arg("state"),
         "The state's checkpoint (``sharded::save_checkpoint``).\n\n"
         "Returns:\n"
         "    bytes: every per-shard sender state and the owner's, the step, size, world and rank, with the\n"
         "    codec's identifier and a CRC32C. Its length may differ between ranks (the last shard is shorter).")
      .def("load_checkpoint", [](const sharded_box& c, sharded_state_box& s, nb::bytes data) {
        load_from(state_of(c, s), *c.impl, data);
      }, nb::arg("state"), nb::arg("data"),
         "Restores :meth:`checkpoint` bytes of the same size, world size and rank: the run continues byte for byte.\n\n"
         "Args:\n"
         "    state (ShardedState): a state of this codec, size, world and rank.\n"
         "    data (bytes): the checkpoint.\n\n"
         "Raises:\n"
         "    gradcomp.Error: corrupted bytes (``checksum_mismatch``, ``truncated``, ...), another codec or mode\n"
         "        (``codec_mismatch``), another size, world or rank (``size_mismatch``); the state is unchanged then.")
      .def("restore_elastic", [](const sharded_box& c, sharded_state_box& s, const std::vector<nb::bytes>& saved) {
        restore_from(state_of(c, s), *c.impl, saved);
      }, nb::arg("state"), nb::arg("saved"),
         "Restores this rank from the checkpoints of every rank of a run of any world size (``restore_elastic``).\n\n"
         "What error feedback owes stays exact as sums over ranks: ``state`` holds, on its own new shard, the\n"
         "saved ranks' sender residuals added in rank order (0 on its other shards), and, in all-reduce mode,\n"
         "the saved owners' residuals over its new shard. Thresholds restart; the step continues.\n\n"
         "Args:\n"
         "    state (ShardedState): a fresh state of this rank in the new world.\n"
         "    saved (Sequence[bytes]): :meth:`checkpoint` of every saved rank (any order).\n\n"
         "Raises:\n"
         "    gradcomp.Error: a corrupted or missing checkpoint, another codec or mode, another size or steps that\n"
         "        differ; the state is unchanged then.")
      .def("check", [](const sharded_box& c) { c.checks->check(); },
           "Raises the first error the device found in any of this codec's device states since the last\n"
           "check (a bad received slot), and clears them all. Waits for the devices; nothing to do for CPU\n"
           "states, whose calls raise at once.\n\n"
           "Raises:\n"
           "    gradcomp.Error: the first error reported (``checksum_mismatch``, ``bad_header``, ...).")
      .def_prop_rw("check_interval", [](const sharded_box& c) { return c.checks->interval; },
                   [](const sharded_box& c, std::uint64_t v) { c.checks->interval = v; },
                   "Device states: the last phase's :meth:`receive` runs :meth:`check` every this many calls\n"
                   "(default 256; 0: only on demand).")
      .def("__repr__", [](const sharded_box& c) {
        std::string r = "gradcomp.Sharded('" + c.name + "', mode='" + c.mode + "'" + c.given;
        if (c.given.find("error_feedback=") == std::string::npos)
          r += std::string(", error_feedback=") + (c.comp->error_feedback() ? "True" : "False");
        return r + ")";
      });
}

}  // namespace gradcomp_py
