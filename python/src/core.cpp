// The module's core: gradcomp.Error (raised for every gradcomp failure, with .code), the
// functions codecs(), build_info() and crc32c(), and the conversions between Python values and
// the registry's options that every part of the bindings uses.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>
#include <variant>

#include "arrays.hpp"

namespace gradcomp_py {

gc::dtype parse_dtype(nb::handle h) {
  const std::string s = nb::cast<std::string>(nb::str(h));
  if (s.ends_with("bfloat16")) return gc::dtype::bf16;
  if (s.ends_with("float32")) return gc::dtype::f32;
  throw nb::type_error("dtype must be float32 or bfloat16");
}

std::string kwargs_repr(const nb::kwargs& kw) {
  std::string out;
  for (auto [k, v] : kw) out += ", " + nb::cast<std::string>(k) + "=" + nb::cast<std::string>(nb::repr(v));
  return out;
}

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
  // Not a structured binding: clang before 16 cannot capture one in a lambda.
  for (const auto& kv : o) std::visit([&](const auto& x) { d[kv.first.c_str()] = x; }, kv.second);
  return d;
}

void bind_core(nb::module_& m) {
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "gradcomp.Error",
      "A gradcomp call failed: a frame, checkpoint or buffer failed the library's checks, or an option is invalid.\n\n"
      "Attributes:\n"
      "    code (str): the library's error code: \"invalid_argument\", \"buffer_too_small\", \"size_mismatch\",\n"
      "        \"truncated\", \"bad_magic\", \"unsupported_version\", \"bad_header\", \"codec_mismatch\",\n"
      "        \"checksum_mismatch\", \"count_too_large\", \"index_out_of_range\", \"index_not_ascending\",\n"
      "        \"non_finite_value\", \"device_error\" or \"bad_meta\".\n\n"
      "Decoding and restoring calls that raise it leave their outputs as they were.",
      PyExc_RuntimeError, nullptr));
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
  }, nb::sig("def codecs() -> dict[str, str]"),
     "The codecs :class:`Compressor` accepts.\n\n"
     "Returns:\n"
     "    dict[str, str]: codec name -> what it is (e.g. ``\"topk\"``, ``\"int8\"``, ``\"bf16\"``).");

  m.def("build_info", [] {
    const cuda_build b = cuda_build_info();
    nb::dict d;
    d["cuda"] = b.cuda;
    d["cuda_version"] = b.cuda ? nb::object(nb::str(b.version.c_str())) : nb::none();
    d["cuda_architectures"] = b.cuda ? nb::object(nb::str(b.architectures.c_str())) : nb::none();
    nb::list codecs;
    if (b.cuda)
      for (const entry& e : registry()) {
        options o;
        if (e.name == "acctfm" || e.name == "dct_topk") continue;  // row top-k (cols required): CPU only
        if (make_codec(e.name, o)->make_device(std::make_shared<device_context>())) codecs.append(e.name);
      }
    d["cuda_codecs"] = codecs;
    nb::list isa;
    isa.append("baseline");
#if GRADCOMP_CPU_DISPATCH
    isa.append("avx2");
    isa.append("avx512");
#endif
    d["cpu_isa"] = isa;
    const gc::cpu::isa a = gc::cpu::active_isa();
    d["cpu_isa_active"] = a == gc::cpu::isa::avx512 ? "avx512" : a == gc::cpu::isa::avx2 ? "avx2" : "baseline";
    return d;
  }, nb::sig("def build_info() -> dict[str, object]"),
     "What this build of the extension holds.\n\n"
     "Returns:\n"
     "    dict: ``cuda`` (bool: CUDA kernels compiled in), ``cuda_version`` (the CUDA toolkit's, e.g.\n"
     "    ``\"13.0\"``, or None), ``cuda_architectures`` (e.g. ``\"90\"``, or None), ``cuda_codecs`` (the\n"
     "    codecs that run on CUDA tensors), ``cpu_isa`` (the CPU code versions compiled in) and\n"
     "    ``cpu_isa_active`` (the one this CPU runs).");

  m.def("crc32c", [](nb::bytes data, std::uint32_t value) {
    return gc::crc32c({static_cast<const std::byte*>(data.data()), data.size()}, value);
  }, nb::arg("data"), nb::arg("value") = 0,
     "CRC32C (Castagnoli) of bytes, the checksum of every gradcomp frame and checkpoint.\n\n"
     "Args:\n"
     "    data (bytes): the bytes.\n"
     "    value (int): the CRC of the bytes before ``data``, to checksum a stream piece by piece.\n\n"
     "Returns:\n"
     "    int: the CRC32C, e.g. ``crc32c(b\"123456789\") == 0xE3069283``.");
}

}  // namespace gradcomp_py
