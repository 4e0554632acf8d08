// gradcomp.State and gradcomp.Compressor: compressors by name on any DLPack / buffer-protocol
// array (torch tensors, NumPy arrays) without copies. Arrays must be C-contiguous, on the CPU or
// (a CUDA build, the codecs of device.hpp) a CUDA device; gradients are float32 or bfloat16,
// payloads are 1-byte arrays. Each call runs on the backend of its arrays (backend.hpp's
// codec_backend: the codec on the CPU, its kernels on a CUDA device) over a State of that
// backend (codec_state).

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"

namespace gradcomp_py {

namespace {

struct codec_state_box {
  std::unique_ptr<codec_state> st;  // on the CPU or a CUDA device
};

struct codec_box {
  std::string name;
  std::unique_ptr<codec> impl;
  std::string given;  // the keyword options as passed, for repr ("density=0.01, ...")
  std::shared_ptr<device_context> ctx = std::make_shared<device_context>();
  std::unique_ptr<codec_backend> kernels{};  // made on first use on a CUDA device

  // The backend of a call on arrays of `device`: the codec on the CPU, its kernels on a CUDA device.
  codec_backend& on(int device) {
    if (device < 0) return *impl;
    if (!kernels) {
      if (!cuda_build_info().cuda) raise(gc::errc::device_error, "this build of gradcomp has no CUDA support");
      kernels = impl->make_device(ctx);
      if (!kernels)
        raise(gc::errc::invalid_argument,
               "codec '" + name + "' has no CUDA kernels (threshold, random-k and row top-k select on the CPU only, and "
               "the transformed codecs run there): pass CPU tensors");
    }
    return *kernels;
  }
};

void check_state_device(const codec_state_box& st, int device) {
  if (st.st->device() != device)
    throw nb::value_error(("state: made for " + device_name(st.st->device()) + ", the arrays are on " + device_name(device) +
                           " (Compressor.make_state(n, device=...))")
                              .c_str());
}

// decompress / accumulate: on the CPU at once, on a CUDA device queued on its current stream.
void decode_into(codec_box& c, const in_array& payload, const out_array& out, bool add, const char* call) {
  const int device = call_device(call, payload, out);
  check_contiguous(out, "out");
  const gc::dtype t = grad_dtype(out, "out");
  const auto p = payload_view(payload, "payload", device);
  const codec_backend& k = c.on(device);
  const device_stream s = stream_of(device);
  nb::gil_scoped_release unlocked;
  k.decode(p, const_cast<void*>(out.data()), out.size(), t, add, s);
}

}  // namespace

void bind_state(nb::module_& m) {
  nb::class_<codec_state_box>(m, "State",
      "One buffer's state for a :class:`Compressor`: step, error-feedback residual, thresholds.\n\n"
      "Made by :meth:`Compressor.make_state` for a buffer of a fixed size; pass it to every "
      ":meth:`Compressor.compress` of that buffer. Its arrays live in C++ and are exposed as NumPy views "
      "(``torch.from_dlpack(state.residual)`` shares them too).")
      .def_prop_ro("size", [](const codec_state_box& s) { return s.st->size(); }, "Elements of the buffer the state serves.")
      .def_prop_ro("device", [](const codec_state_box& s) { return device_name(s.st->device()); },
                   "Where the state lives: ``\"cpu\"`` or ``\"cuda:N\"`` (the device of the tensors it serves).")
      .def_prop_rw("step", [](codec_state_box& s) { return s.st->step(stream_of(s.st->device())); },
                   [](codec_state_box& s, std::uint64_t v) { s.st->set_step(v, stream_of(s.st->device())); },
                   "Gradient buffers compressed with this state (settable; on a CUDA device, reading or setting it waits for the "
                   "device).")
      .def_prop_ro("residual", [](codec_state_box& s) { return float_array(s.st->residual()); }, nb::keep_alive<0, 1>(),
         "The error-feedback residual of ``size`` elements (empty without error feedback), without a copy: a float32 "
         "NumPy view for a CPU state, a CUDA tensor on the state's device for a device state.")
      .def_prop_ro("thresholds", [](codec_state_box& s) { return numpy_view(s.st->thresholds()); }, nb::rv_policy::reference_internal,
                   "Threshold codecs: each chunk's last selection threshold (0: none yet), a float32 NumPy view; empty "
                   "for other codecs.")
      .def("checkpoint", [](codec_state_box& s) {
        const std::vector<std::byte> b = s.st->checkpoint(stream_of(s.st->device()));
        return nb::bytes(b.data(), b.size());
      }, "The state as a self-checking byte image.\n\n"
         "Returns:\n"
         "    bytes: residual, momentum, thresholds and step, with the codec's identifier and a CRC32C.")
      .def("restore", [](codec_state_box& s, nb::bytes b) {
        s.st->load_checkpoint({static_cast<const std::byte*>(b.data()), b.size()}, stream_of(s.st->device()));
      }, nb::arg("data"),
         "Restores :meth:`checkpoint` bytes into this state.\n\n"
         "Args:\n"
         "    data (bytes): a checkpoint of a state of the same codec and size, made on any device.\n\n"
         "Raises:\n"
         "    gradcomp.Error: corrupted bytes (``checksum_mismatch``, ``truncated``, ...), another codec\n"
         "        (``codec_mismatch``) or another size; the state is unchanged then.")
      .def("__repr__", [](const codec_state_box& s) {
        codec_state& x = *s.st;
        // A device state's step would wait for the device.
        return "gradcomp.State(codec='" + x.codec + "', size=" + std::to_string(x.size()) +
               (x.device() >= 0 ? ", device='" + device_name(x.device()) + "'" : ", step=" + std::to_string(x.step({}))) +
               ", residual=" + std::to_string(x.residual().size) + ", thresholds=" + std::to_string(x.thresholds().size) + ")";
      });
}

void bind_compressor(nb::module_& m) {
  nb::class_<codec_box>(m, "Compressor",
      "A gradcomp compressor chosen by name, configured by keyword options.\n\n"
      "Args:\n"
      "    name (str): a codec from :func:`codecs` (``\"topk\"``, ``\"int8\"``, ``\"bf16\"``, ...).\n"
      "    **options: the codec's options, e.g. ``density`` (sparsifiers), ``group`` (values per scale),\n"
      "        ``error_feedback`` (bool), ``rounding`` (``\"nearest\"`` / ``\"stochastic\"``), ``levels``,\n"
      "        ``estimate`` (``\"dgc\"`` / ``\"tagc\"``), ``sample_fraction``, ``chunk_bytes``, ``feedback_scale``,\n"
      "        ``seed``, ``allow_non_finite``, ``compact_indices``; :attr:`options` lists the codec's own.\n\n"
      "Raises:\n"
      "    gradcomp.Error: an unknown codec or option, or an invalid value (``code == \"invalid_argument\"``).\n\n"
      "Example::\n\n"
      "    >>> c = gradcomp.Compressor(\"topk\", density=0.01)\n"
      "    >>> st = c.make_state(g.numel())\n"
      "    >>> out = torch.empty(c.max_payload_bytes(g.numel()), dtype=torch.uint8)\n"
      "    >>> frames = out[:c.compress(g, st, out)]\n"
      "    >>> s = torch.zeros_like(g); c.accumulate(frames, s)")
      .def("__init__", [](codec_box* self, const std::string& name, nb::kwargs kw) {
        new (self) codec_box{name, make_codec(name, to_options(kw)), kwargs_repr(kw)};
      }, nb::arg("name"), nb::arg("options"))
      .def_prop_ro("name", [](const codec_box& c) { return c.name; }, "The codec's name.")
      .def_prop_ro("codec_id", [](const codec_box& c) { return c.impl->codec_id(); },
                   "The 32-bit identifier in every frame header and checkpoint (the policies and their configuration).")
      .def_prop_ro("summable", [](const codec_box& c) { return c.impl->summable(); },
                   "True for plain casts (fp32, bf16, fp16), whose codes a transport may add (all-reduce).")
      .def_prop_ro("wire_bits", [](const codec_box& c) { return c.impl->wire_bits(); }, "Bits of one quantized value.")
      .def_prop_ro("error_feedback", [](const codec_box& c) { return c.impl->error_feedback(); },
                   "True when states carry an error-feedback residual.")
      .def_prop_ro("options", [](const codec_box& c) { return to_dict(c.impl->effective_options()); },
                   "Every option of the codec with its effective value (defaults included).")
      .def("max_payload_bytes", [](const codec_box& c, std::size_t n, nb::handle dtype) {
        return c.impl->max_payload_bytes(n, dtype.is_none() ? gc::dtype::f32 : parse_dtype(dtype));
      }, nb::arg("n"), nb::arg("dtype") = nb::none(),
         nb::sig("def max_payload_bytes(self, n: int, dtype: torch.dtype | None = None) -> int"),
         "The most bytes :meth:`compress` writes for ``n`` elements.\n\n"
         "Args:\n"
         "    n (int): gradient elements.\n"
         "    dtype (torch.dtype, optional): ``torch.float32`` (default) or ``torch.bfloat16``.\n\n"
         "Returns:\n"
         "    int: the size ``out`` needs.")
      .def("make_state", [](codec_box& c, std::size_t n, nb::handle device) {
        auto host = std::make_unique<cpu_codec_state>(c.impl->host_state(n), c.impl->codec_id(), c.name);
        const int where = device.is_none() ? -1 : parse_device(device);
        const codec_backend& k = c.on(where);
        return codec_state_box{k.make_state(std::move(host), placement(where))};
      }, nb::arg("n"), nb::arg("device") = nb::none(),
         nb::sig("def make_state(self, n: int, device: torch.device | str | int | None = None) -> State"),
         "A fresh state for a buffer of ``n`` elements.\n\n"
         "Args:\n"
         "    n (int): elements of the buffer.\n"
         "    device (torch.device | str | int, optional): where the gradients live: the CPU (default) or a CUDA\n"
         "        device, whose state is kept in that device's memory.\n\n"
         "Returns:\n"
         "    State: step 0, zero residual.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a CUDA device with a codec that has no CUDA kernels (``invalid_argument``) or a\n"
         "        build without CUDA (``device_error``).")
      .def("compress", [](codec_box& c, in_array grad, codec_state_box& st, out_array out) {
        const int device = call_device("compress", grad, out);
        check_state_device(st, device);
        check_contiguous(grad, "grad");
        const gc::dtype t = grad_dtype(grad, "grad");
        const auto o = payload_view(out, "out", device);
        const codec_backend& k = c.on(device);
        k.check_state(*st.st, grad.size());
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        return k.compress(grad.data(), grad.size(), t, *st.st, o, s);
      }, nb::arg("grad").noconvert(), nb::arg("state"), nb::arg("out").noconvert(),
         nb::sig("def compress(self, grad: torch.Tensor, state: State, out: torch.Tensor) -> int"),
         "Compresses ``grad`` into ``out``.\n\n"
         "On a CUDA device the call is queued on the device's current stream and returns without waiting;\n"
         "the size it returns is fixed by the codec and ``grad``'s size (sparse frames carry u32 index lists),\n"
         "and an error found on the device (non-finite values) is raised by a later :meth:`check`.\n\n"
         "Args:\n"
         "    grad (torch.Tensor): float32 or bfloat16 gradient (read only), on the CPU or a CUDA device.\n"
         "    state (State): the buffer's state (step, residual and thresholds are updated).\n"
         "    out (torch.Tensor): uint8, at least :meth:`max_payload_bytes` long; the frames are written\n"
         "        at its start.\n\n"
         "Returns:\n"
         "    int: the bytes written (the frames are ``out[:n]``).\n\n"
         "Raises:\n"
         "    TypeError: ``grad`` is not float32 / bfloat16, or ``out`` is not a byte array.\n"
         "    ValueError: an array is not contiguous, the arrays are on two devices, or the state was made for\n"
         "        another device.\n"
         "    gradcomp.Error: ``out`` too small (``buffer_too_small``), a state of another size, non-finite\n"
         "        values (unless ``allow_non_finite``).")
      .def("decompress", [](codec_box& c, in_array payload, out_array out) { decode_into(c, payload, out, false, "decompress"); },
         nb::arg("payload").noconvert(), nb::arg("out").noconvert(),
         nb::sig("def decompress(self, payload: torch.Tensor, out: torch.Tensor) -> None"),
         "Decodes frames into ``out``: each frame's chunk is overwritten (its unsent elements become 0);\n"
         "elements outside every frame's chunk keep their values. On a CUDA device the call is queued on\n"
         "the device's current stream, and a frame failing validation is raised by a later :meth:`check`.\n\n"
         "Args:\n"
         "    payload (torch.Tensor): uint8 frames, as :meth:`compress` wrote them.\n"
         "    out (torch.Tensor): float32 or bfloat16, the compressed buffer's size.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a frame failed validation (``checksum_mismatch``, ``codec_mismatch``,\n"
         "        ``truncated``, ...); ``out`` is untouched then.")
      .def("accumulate", [](codec_box& c, in_array payload, out_array out) { decode_into(c, payload, out, true, "accumulate"); },
         nb::arg("payload").noconvert(), nb::arg("out").noconvert(),
         nb::sig("def accumulate(self, payload: torch.Tensor, out: torch.Tensor) -> None"),
         "Adds the decoded frames to ``out`` (``out += decode(payload)``).\n\n"
         "Every frame is validated before anything is added. On a CUDA device the call is queued on the\n"
         "device's current stream, and a frame failing validation is raised by a later :meth:`check`.\n\n"
         "Args:\n"
         "    payload (torch.Tensor): uint8 frames, as :meth:`compress` wrote them.\n"
         "    out (torch.Tensor): float32 or bfloat16, the compressed buffer's size.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a frame failed validation; ``out`` is untouched then.")
      .def("accumulate_gathered", [](const codec_box& c, in_array gathered, out_array out, std::size_t slot_bytes) {
        check_cpu_contiguous(out, "out");
        const gc::dtype t = grad_dtype(out, "out");
        const auto p = byte_view(gathered, "gathered");
        nb::gil_scoped_release unlocked;
        c.impl->accumulate_gathered(p, slot_bytes, const_cast<void*>(out.data()), out.size(), t);
      }, nb::arg("gathered").noconvert(), nb::arg("out").noconvert(), nb::arg("slot_bytes") = 0,
         nb::sig("def accumulate_gathered(self, gathered: torch.Tensor, out: torch.Tensor, slot_bytes: int = 0) -> None"),
         "Adds every rank's payload of an all-gather to ``out``: the gather path's sum.\n\n"
         "Every rank accumulating the same gathered bytes, its own payload included, holds the same sum bit\n"
         "for bit. Every frame of every payload is validated before anything is added.\n\n"
         "Args:\n"
         "    gathered (torch.Tensor): uint8, the payloads back to back (``slot_bytes == 0``), or one per\n"
         "        slot of ``slot_bytes`` (a fixed-size all-gather of :meth:`max_payload_bytes`; the rest of\n"
         "        each slot is ignored).\n"
         "    out (torch.Tensor): float32 or bfloat16, the compressed buffer's size.\n"
         "    slot_bytes (int): the slot size, or 0.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a frame failed validation, or ``gathered`` is not a whole number of slots\n"
         "        (``size_mismatch``); ``out`` is untouched then.")
      .def("measure_path", [](const codec_box& c, in_array sample, const std::string& coll, int repeats) {
        const auto x = float_span(sample, "sample");
        gc::model::collective k{};
        if (coll == "all_gather") k = gc::model::collective::all_gather;
        else if (coll == "all_reduce") k = gc::model::collective::all_reduce;
        else throw nb::value_error("collective: 'all_gather' or 'all_reduce'");
        gc::model::wire_path w;
        {
          nb::gil_scoped_release unlocked;
          w = c.impl->measure_path(x, k, repeats);
        }
        return wire_path_dict(w);
      }, nb::arg("sample").noconvert(), nb::arg("collective") = "all_gather", nb::arg("repeats") = 3,
         nb::sig("def measure_path(self, sample: torch.Tensor, collective: str = 'all_gather', repeats: int = 3) -> dict[str, float | str]"),
         "This codec as a path of :func:`plan_layer`, timed on this host.\n\n"
         "The fastest of ``repeats`` compress and accumulate calls on ``sample``.\n\n"
         "Args:\n"
         "    sample (torch.Tensor): float32 values like the ones to send (one chunk gives the frame size).\n"
         "    collective (str): ``\"all_gather\"`` (default; payloads differ per rank) or ``\"all_reduce\"``.\n"
         "    repeats (int): timed calls.\n\n"
         "Returns:\n"
         "    dict: ``wire_bytes_per_element``, ``frame_bytes``, ``encode_elements_per_s``,\n"
         "    ``decode_elements_per_s``, ``call_s``, ``collective``.")
      .def("encode_cast", [](codec_box& c, in_array src, out_array codes, float scale) {
        const int device = call_device("encode_cast", src, codes);
        check_contiguous(src, "src");
        check_contiguous(codes, "codes");
        if (grad_dtype(src, "src") != gc::dtype::f32) throw nb::type_error("src: float32 expected");
        if (codes.size() != src.size() || codes.itemsize() * 8 != c.impl->wire_bits())
          throw nb::value_error("codes: one element of the wire type per source element expected");
        const codec_backend& k = c.on(device);
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        k.encode_cast(static_cast<const float*>(src.data()), const_cast<void*>(codes.data()), src.size(), scale, s);
      }, nb::arg("src").noconvert(), nb::arg("codes").noconvert(), nb::arg("scale") = 1.0f,
         nb::sig("def encode_cast(self, src: torch.Tensor, codes: torch.Tensor, scale: float = 1.0) -> None"),
         "Summable casts: ``codes = cast(src * scale)`` with the library's conversion (round to nearest even).\n\n"
         "Args:\n"
         "    src (torch.Tensor): float32 values.\n"
         "    codes (torch.Tensor): one element of the wire type per value (float32, bfloat16 or float16).\n"
         "    scale (float): multiplies every value first (default 1.0).\n\n"
         "Raises:\n"
         "    gradcomp.Error: the codec is not a summable cast.")
      .def("decode_cast", [](codec_box& c, in_array codes, out_array dst, bool add) {
        const int device = call_device("decode_cast", codes, dst);
        check_contiguous(codes, "codes");
        check_contiguous(dst, "dst");
        if (grad_dtype(dst, "dst") != gc::dtype::f32) throw nb::type_error("dst: float32 expected");
        if (codes.size() != dst.size() || codes.itemsize() * 8 != c.impl->wire_bits())
          throw nb::value_error("codes: one element of the wire type per destination element expected");
        const codec_backend& k = c.on(device);
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        k.decode_cast(codes.data(), const_cast<float*>(static_cast<const float*>(dst.data())), dst.size(), add, s);
      }, nb::arg("codes").noconvert(), nb::arg("dst").noconvert(), nb::arg("add") = false,
         nb::sig("def decode_cast(self, codes: torch.Tensor, dst: torch.Tensor, add: bool = False) -> None"),
         "Summable casts: ``dst = decode(codes)``, or ``dst += decode(codes)`` with ``add=True``.\n\n"
         "Args:\n"
         "    codes (torch.Tensor): codes of the wire type (e.g. an all-reduced sum).\n"
         "    dst (torch.Tensor): float32, one value per code.\n"
         "    add (bool): add instead of overwriting (default False).\n\n"
         "Raises:\n"
         "    gradcomp.Error: the codec is not a summable cast.")
      .def("compress_many", [](codec_box& c, std::vector<in_array> grads, std::vector<codec_state_box*> states, out_array out,
                               std::vector<std::size_t> offsets) {
        if (grads.size() != states.size() || grads.size() != offsets.size())
          throw nb::value_error("compress_many: one state and one offset per gradient");
        const int device = call_device("compress_many", out, out);
        std::byte* base = payload_view(out, "out", device).data();
        struct item {
          const void* grad;
          std::size_t n, cap;
          gc::dtype t;
          codec_state* st;
          std::byte* at;
        };
        std::vector<item> items;
        for (std::size_t j = 0; j < grads.size(); ++j) {
          const in_array& g = grads[j];
          if (call_device("compress_many", g, out) != device) throw nb::value_error("compress_many: one device");
          check_contiguous(g, "grad");
          const gc::dtype t = grad_dtype(g, "grad");
          if (states[j] == nullptr) throw nb::type_error("compress_many: states must be State objects");
          const std::size_t cap = c.impl->max_payload_bytes(g.size(), t);
          if (offsets[j] % 8 != 0 || !within(offsets[j], cap, out.size()))
            throw nb::value_error("compress_many: each frame region (offset, max_payload_bytes) must lie in out, "
                                  "at a multiple of 8");
          check_state_device(*states[j], device);
          c.on(device).check_state(*states[j]->st, g.size());
          if (states[j]->st->size() != g.size()) raise(gc::errc::size_mismatch, "gradient size differs from the state's");
          items.push_back({g.data(), g.size(), cap, t, states[j]->st.get(), base + offsets[j]});
        }
        const codec_backend& k = c.on(device);
        const device_stream s = stream_of(device);
        std::vector<std::size_t> sizes(items.size());
        nb::gil_scoped_release unlocked;
        for (std::size_t j = 0; j < items.size(); ++j) {
          const item& i = items[j];
          sizes[j] = k.compress(i.grad, i.n, i.t, *i.st, {i.at, i.cap}, s);
        }
        return sizes;
      }, nb::arg("grads"), nb::arg("states"), nb::arg("out").noconvert(), nb::arg("offsets"),
         nb::sig("def compress_many(self, grads: list[torch.Tensor], states: list[State], out: torch.Tensor, offsets: list[int]) -> list[int]"),
         "Compresses several gradients in one call: ``grads[j]`` with ``states[j]`` into ``out`` at\n"
         "``offsets[j]`` (a multiple of 8, with :meth:`max_payload_bytes` of room: :meth:`gather_layout`'s\n"
         "``offsets``), as :meth:`compress` does.\n\n"
         "Returns:\n"
         "    list[int]: each gradient's payload bytes.\n\n"
         "Raises:\n"
         "    As :meth:`compress`; every argument is checked before anything is compressed.")
      .def("gather_layout", [](const codec_box& c, const std::vector<std::size_t>& sizes, const std::vector<nb::handle>& dtypes,
                               const std::vector<std::size_t>& slots, std::size_t small_count, bool cuda) {
        std::vector<gc::dtype> types;
        for (const nb::handle d : dtypes) types.push_back(d.is_none() ? gc::dtype::f32 : parse_dtype(d));
        const gather_block g = gather_layout(*c.impl, sizes, types, slots, small_count, cuda);
        nb::dict d;
        for (const auto& [key, list] : {std::pair{"offsets", &g.offsets}, {"caps", &g.caps}, {"slot_offsets", &g.slot_offsets}})
          d[key] = *list;
        d["small_offset"] = g.small_offset, d["block_bytes"] = g.bytes;
        return d;
      }, nb::arg("sizes"), nb::arg("dtypes"), nb::arg("slots") = std::vector<std::size_t>(), nb::arg("small_count") = 0,
         nb::arg("cuda") = false,
         nb::sig("def gather_layout(self, sizes: list[int], dtypes: list[torch.dtype | None], slots: list[int] = [], "
                 "small_count: int = 0, cuda: bool = False) -> dict"),
         "One rank's block of the DDP hook's all-gather (:mod:`gradcomp.ddp`): ``[int32 payload size of each\n"
         "frame | the frames | the slots | raw float32 values]``, every part at a multiple of 8.\n\n"
         ":meth:`compress_many` writes frame ``j`` at ``offsets[j]`` and :meth:`accumulate_many` reads it there.\n\n"
         "Args:\n"
         "    sizes (list[int]): each frame's gradient elements.\n"
         "    dtypes (list[torch.dtype | None]): each frame's gradient type (None: ``torch.float32``).\n"
         "    slots (list[int]): bytes of each slot after the frames (the sharded path's re-encoded shards).\n"
         "    small_count (int): float32 values after the slots.\n"
         "    cuda (bool): the block travels on a CUDA device (its size is then a multiple of 8, as it is\n"
         "        whenever it holds slots).\n\n"
         "Returns:\n"
         "    dict: ``offsets`` and ``caps`` (each frame's offset and room, :meth:`max_payload_bytes`),\n"
         "    ``slot_offsets``, ``small_offset`` and ``block_bytes`` (the block's size).\n\n"
         "Raises:\n"
         "    gradcomp.Error: ``sizes`` and ``dtypes`` differ in length (``invalid_argument``).\n"
         "    TypeError: another dtype.")
      .def("accumulate_many", [](codec_box& c, in_array gathered, std::size_t block, std::vector<out_array> outs,
                                 std::vector<std::size_t> offsets, std::optional<std::vector<std::size_t>> sizes) {
        if (outs.size() != offsets.size() || (sizes && sizes->size() != outs.size()))
          throw nb::value_error("accumulate_many: one offset (and size) per output");
        const int device = call_device("accumulate_many", gathered, gathered);
        const std::byte* base = payload_view(gathered, "gathered", device).data();
        if (block == 0 || gathered.size() % block != 0)
          raise(gc::errc::size_mismatch, "accumulate_many: gathered is not a whole number of blocks");
        if (device >= 0 && block % 8 != 0) throw nb::value_error("accumulate_many: CUDA blocks must be multiples of 8 bytes");
        if (device >= 0 && !sizes) throw nb::value_error("accumulate_many: CUDA payloads need their sizes");
        if (!sizes && !within(0, 4 * outs.size(), block)) raise(gc::errc::size_mismatch, "accumulate_many: blocks too small for the sizes");
        const std::size_t ranks = gathered.size() / block;
        struct item {
          void* out;
          std::size_t n;
          gc::dtype t;
          std::size_t at, size;
        };
        std::vector<item> items;
        for (std::size_t j = 0; j < outs.size(); ++j) {
          const out_array& o = outs[j];
          if (call_device("accumulate_many", o, gathered) != device) throw nb::value_error("accumulate_many: one device");
          check_contiguous(o, "out");
          items.push_back({const_cast<void*>(o.data()), o.size(), grad_dtype(o, "out"), offsets[j], sizes ? (*sizes)[j] : 0});
        }
        const codec_backend& k = c.on(device);
        const device_stream s = stream_of(device);
        nb::gil_scoped_release unlocked;
        const auto payload = [&](std::size_t j, std::size_t r) -> std::span<const std::byte> {
          const std::byte* row = base + r * block;
          const std::size_t size = sizes ? items[j].size : gc::load_le<std::uint32_t>(row + 4 * j);
          if (!within(items[j].at, size, block))
            raise(gc::errc::size_mismatch, "accumulate_many: a payload reaches past its rank's block");
          return {row + items[j].at, size};
        };
        // Every payload lies in its block before anything is added; on the CPU every payload is
        // also checked (on a device, each payload before it is added: the device's checks run in
        // stream order).
        for (std::size_t j = 0; j < items.size(); ++j)
          for (std::size_t r = 0; r < ranks; ++r) k.check_payload(payload(j, r), items[j].n);
        // Every rank's frames of output j, in rank order: every replica adds the same way.
        for (std::size_t j = 0; j < items.size(); ++j)
          for (std::size_t r = 0; r < ranks; ++r) k.decode(payload(j, r), items[j].out, items[j].n, items[j].t, true, s);
      }, nb::arg("gathered").noconvert(), nb::arg("block"), nb::arg("outs"), nb::arg("offsets"), nb::arg("sizes") = nb::none(),
         nb::sig("def accumulate_many(self, gathered: torch.Tensor, block: int, outs: list[torch.Tensor], offsets: list[int], sizes: list[int] | None = None) -> None"),
         "Adds every rank's payloads of an all-gather to several outputs in one call: the gather path's sum.\n\n"
         "``gathered`` holds one block of ``block`` bytes per rank; output j gets, in rank order, the\n"
         "payload at ``offsets[j]`` of each block, ``sizes[j]`` bytes long (or as long as the int32 at byte\n"
         "``4 * j`` of that block says, CPU only). On the CPU every payload is validated before anything is\n"
         "added; on a CUDA device each payload is validated before it is added, and a failure is raised by a\n"
         "later :meth:`check`.\n\n"
         "Raises:\n"
         "    gradcomp.Error: a payload failed validation (on the CPU the outputs are then untouched), or the\n"
         "        layout does not fit (``size_mismatch``).")
      .def("check", [](codec_box& c) { c.ctx->check(); },
         "Raises the first error a CUDA call of this compressor reported since the last check.\n\n"
         "CUDA calls never wait for the device, so what they find in the data (a frame failing validation,\n"
         "non-finite values) is kept on the device; this waits for every stream the compressor used and reads\n"
         "it. It also runs every :attr:`check_interval` CUDA calls. No-op for CPU calls, which raise at once.\n\n"
         "Raises:\n"
         "    gradcomp.Error: the first failure's code (e.g. ``checksum_mismatch``); the failed call left its\n"
         "        output untouched.")
      .def_prop_rw("check_interval", [](const codec_box& c) { return c.ctx->interval; },
                   [](codec_box& c, std::uint64_t v) { c.ctx->interval = v; },
                   "CUDA calls between two automatic :meth:`check`\\ s (default 256; 0: only on demand).")
      .def("__repr__", [](const codec_box& c) {
        std::string r = "gradcomp.Compressor('" + c.name + "'" + c.given;
        if (c.given.find("error_feedback=") == std::string::npos)
          r += std::string(", error_feedback=") + (c.impl->error_feedback() ? "True" : "False");
        return r + ")";
      });
}

}  // namespace gradcomp_py
