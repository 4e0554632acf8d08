// gradcomp._core: compressors by name on any DLPack / buffer-protocol array (torch tensors,
// NumPy arrays) without copies. Arrays must be C-contiguous and on the CPU; gradients are
// float32 or bfloat16, payloads are 1-byte arrays. gradcomp failures raise gradcomp.Error
// (with .code, e.g. "checksum_mismatch"); wrong arguments raise TypeError / ValueError.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>

#include "arrays.hpp"
#include "codec.hpp"

namespace nb = nanobind;
using namespace gradcomp_py;

namespace {

struct state_box {
  gc::state st;
  std::uint32_t codec_id;
};

struct codec_box {
  std::string name;
  std::unique_ptr<codec> impl;
};

gc::dtype parse_dtype(nb::handle h) {
  const std::string s = nb::cast<std::string>(nb::str(h));
  if (s.ends_with("bfloat16")) return gc::dtype::bf16;
  if (s.ends_with("float32")) return gc::dtype::f32;
  throw nb::type_error("dtype must be float32 or bfloat16");
}

}  // namespace

namespace gradcomp_py {

options to_options(const nb::kwargs& kw) {
  options o;
  for (auto [k, v] : kw) {
    const std::string key = nb::cast<std::string>(k);
    if (nb::isinstance<nb::bool_>(v)) o[key] = nb::cast<bool>(v);
    else if (nb::isinstance<nb::int_>(v)) o[key] = nb::cast<long long>(v);
    else if (nb::isinstance<nb::float_>(v)) o[key] = nb::cast<double>(v);
    else if (nb::isinstance<nb::str>(v)) o[key] = nb::cast<std::string>(v);
    else throw nb::type_error(("option '" + key + "': expected bool, int, float or str").c_str());
  }
  return o;
}

nb::dict to_dict(const options& o) {
  nb::dict d;
  for (const auto& [k, v] : o) std::visit([&](const auto& x) { d[k.c_str()] = x; }, v);
  return d;
}

}  // namespace gradcomp_py

NB_MODULE(_core, m) {
  m.doc() = "gradcomp: gradient compression (bindings of the header-only C++ library)";

  static nb::object error_type =
      nb::steal(PyErr_NewException("gradcomp.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const codec_error& e) {
      nb::object inst = error_type(nb::str(e.what()));
      inst.attr("code") = nb::str(errc_name(e.code));
      PyErr_SetObject(error_type.ptr(), inst.ptr());
    }
  });

  m.def("codecs", [] {
    nb::dict d;
    for (const entry& e : registry()) d[e.name.c_str()] = e.description;
    return d;
  }, "Names of the codecs and what each is.");

  nb::class_<state_box>(m, "State", "Per-buffer state: step, error-feedback residual, thresholds.")
      .def_prop_ro("size", [](const state_box& s) { return s.st.size; })
      .def_prop_rw("step", [](const state_box& s) { return s.st.step; }, [](state_box& s, std::uint64_t v) { s.st.step = v; })
      .def_prop_ro("residual", [](state_box& s) { return float_view(s.st.residual); }, nb::rv_policy::reference_internal,
                   "The residual as a NumPy view (no copy; empty without error feedback).")
      .def_prop_ro("thresholds", [](state_box& s) { return float_view(s.st.thresholds); }, nb::rv_policy::reference_internal)
      .def("checkpoint", [](const state_box& s) {
        std::string bytes(gc::checkpoint_bytes(s.st), '\0');
        const auto r = gc::save_checkpoint(s.st, s.codec_id, std::as_writable_bytes(std::span(bytes)));
        if (!r) raise(r.error());
        return nb::bytes(bytes.data(), bytes.size());
      }, "The state as a self-checking byte image (residual, momentum, thresholds, step).")
      .def("restore", [](state_box& s, nb::bytes b) {
        check(gc::load_checkpoint({static_cast<const std::byte*>(b.data()), b.size()}, s.codec_id, s.st));
      }, "Restores checkpoint() bytes; the state is unchanged on error.");

  nb::class_<codec_box>(m, "Compressor", "A gradcomp compressor chosen by name, configured by keyword options.")
      .def("__init__", [](codec_box* self, const std::string& name, nb::kwargs kw) {
        new (self) codec_box{name, make_codec(name, to_options(kw))};
      }, nb::arg("name"), nb::arg("kwargs"))
      .def_prop_ro("name", [](const codec_box& c) { return c.name; })
      .def_prop_ro("codec_id", [](const codec_box& c) { return c.impl->codec_id(); })
      .def_prop_ro("summable", [](const codec_box& c) { return c.impl->summable(); },
                   "True for plain casts, whose codes a transport may add (all-reduce).")
      .def_prop_ro("wire_bits", [](const codec_box& c) { return c.impl->wire_bits(); })
      .def_prop_ro("error_feedback", [](const codec_box& c) { return c.impl->error_feedback(); })
      .def_prop_ro("options", [](const codec_box& c) { return to_dict(c.impl->effective_options()); })
      .def("max_payload_bytes", [](const codec_box& c, std::size_t n, nb::handle dtype) {
        return c.impl->max_payload_bytes(n, dtype.is_none() ? gc::dtype::f32 : parse_dtype(dtype));
      }, nb::arg("n"), nb::arg("dtype") = nb::none())
      .def("make_state", [](const codec_box& c, std::size_t n) { return state_box{c.impl->make_state(n), c.impl->codec_id()}; },
           nb::arg("n"))
      .def("compress", [](const codec_box& c, in_array grad, state_box& st, out_array out) {
        check_cpu_contiguous(grad, "grad");
        const gc::dtype t = grad_dtype(grad, "grad");
        const auto o = byte_view(out, "out");
        nb::gil_scoped_release unlocked;
        return c.impl->compress(grad.data(), grad.size(), t, st.st, o);
      }, nb::arg("grad").noconvert(), nb::arg("state"), nb::arg("out").noconvert(),
         "Compresses grad into out (uint8, >= max_payload_bytes); returns the bytes written.")
      .def("decompress", [](const codec_box& c, in_array payload, out_array out) {
        check_cpu_contiguous(out, "out");
        const gc::dtype t = grad_dtype(out, "out");
        const auto p = byte_view(payload, "payload");
        nb::gil_scoped_release unlocked;
        c.impl->decode(p, const_cast<void*>(out.data()), out.size(), t, false);
      }, nb::arg("payload").noconvert(), nb::arg("out").noconvert())
      .def("accumulate", [](const codec_box& c, in_array payload, out_array out) {
        check_cpu_contiguous(out, "out");
        const gc::dtype t = grad_dtype(out, "out");
        const auto p = byte_view(payload, "payload");
        nb::gil_scoped_release unlocked;
        c.impl->decode(p, const_cast<void*>(out.data()), out.size(), t, true);
      }, nb::arg("payload").noconvert(), nb::arg("out").noconvert(),
         "out += the decoded frames; every frame is validated first (out untouched on error).")
      .def("encode_cast", [](const codec_box& c, in_array src, out_array codes, float scale) {
        check_cpu_contiguous(src, "src");
        check_cpu_contiguous(codes, "codes");
        if (grad_dtype(src, "src") != gc::dtype::f32) throw nb::type_error("src: float32 expected");
        if (codes.size() != src.size() || codes.itemsize() * 8 != c.impl->wire_bits())
          throw nb::value_error("codes: one element of the wire type per source element expected");
        nb::gil_scoped_release unlocked;
        c.impl->encode_cast(static_cast<const float*>(src.data()), const_cast<void*>(codes.data()), src.size(), scale);
      }, nb::arg("src").noconvert(), nb::arg("codes").noconvert(), nb::arg("scale") = 1.0f,
         "Summable casts: codes = cast(src * scale), with the library's conversion.")
      .def("decode_cast", [](const codec_box& c, in_array codes, out_array dst, bool add) {
        check_cpu_contiguous(codes, "codes");
        check_cpu_contiguous(dst, "dst");
        if (grad_dtype(dst, "dst") != gc::dtype::f32) throw nb::type_error("dst: float32 expected");
        if (codes.size() != dst.size() || codes.itemsize() * 8 != c.impl->wire_bits())
          throw nb::value_error("codes: one element of the wire type per destination element expected");
        nb::gil_scoped_release unlocked;
        c.impl->decode_cast(codes.data(), const_cast<float*>(static_cast<const float*>(dst.data())), dst.size(), add);
      }, nb::arg("codes").noconvert(), nb::arg("dst").noconvert(), nb::arg("add") = false,
         "Summable casts: dst = decode(codes), or dst += decode(codes).");

  bind_summable(m);
}
