#pragma once
// Array checks shared by the bindings: any DLPack / buffer-protocol array (torch tensors, NumPy
// arrays), used in place, never copied.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec.hpp"
#include "device.hpp"

namespace gradcomp_py {

namespace nb = nanobind;
namespace gc = gradcomp;

using in_array = nb::ndarray<nb::ro>;  // any dtype, device and layout; checked below
using out_array = nb::ndarray<>;      // the same, writable

template <class A>
bool contiguous(const A& a) {
  std::int64_t expect = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expect) return false;
    expect *= static_cast<std::int64_t>(a.shape(d));
  }
  return true;
}

template <class A>
void check_contiguous(const A& a, const char* what) {
  if (!contiguous(a)) throw nb::value_error((std::string(what) + ": array must be contiguous (call .contiguous())").c_str());
}

template <class A>
bool on_cuda(const A& a) {
  return a.device_type() == nb::device::cuda::value;
}

// For the calls that have no CUDA path (and every call of a CPU-only build).
template <class A>
void check_cpu_contiguous(const A& a, const char* what) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::value_error((std::string(what) + (cuda_build_info().cuda ? ": this call takes CPU arrays only"
                                                                         : ": only CPU arrays (this build has no CUDA support)"))
                              .c_str());
  check_contiguous(a, what);
}

template <class A>
gc::dtype grad_dtype(const A& a, const char* what) {
  const nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>()) return gc::dtype::f32;
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16 && t.lanes == 1)
    return gc::dtype::bf16;
  throw nb::type_error((std::string(what) + ": gradients must be float32 or bfloat16").c_str());
}

template <class A>
std::span<std::byte> byte_view(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  if (a.itemsize() != 1) throw nb::type_error((std::string(what) + ": payloads are uint8 (or int8) arrays").c_str());
  return {static_cast<std::byte*>(const_cast<void*>(a.data())), a.size()};
}

// The bytes of a contiguous CPU array of any element type (phase buffers: int32 for u32 words,
// bfloat16 / float32 cells).
template <class A>
std::span<std::byte> raw_view(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  return {static_cast<std::byte*>(const_cast<void*>(a.data())), a.size() * a.itemsize()};
}

// A float32 array as a span.
template <class A>
std::span<float> float_span(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  if (a.dtype() != nb::dtype<float>()) throw nb::type_error((std::string(what) + ": float32 expected").c_str());
  return {static_cast<float*>(const_cast<void*>(a.data())), a.size()};
}

// A NumPy view of a state array (torch.from_numpy wraps it without a copy either).
inline nb::ndarray<nb::numpy, float, nb::ndim<1>> float_view(std::vector<float>& v) {
  return nb::ndarray<nb::numpy, float, nb::ndim<1>>(v.data(), {v.size()}, nb::handle());
}

// Keyword options to the registry's option values, and back; ", key=repr(value)" of each
// keyword, for reprs.
options to_options(const nb::kwargs& kw);
nb::dict to_dict(const options& o);
std::string kwargs_repr(const nb::kwargs& kw);

// torch.float32 / torch.bfloat16 (or any object whose str ends so) to the library's dtype.
gc::dtype parse_dtype(nb::handle h);

void bind_summable(nb::module_& m);
void bind_sharded(nb::module_& m);
void bind_planner(nb::module_& m);
// A planner path as a dict (planner.cpp), for Compressor.measure_path.
nb::dict wire_path_dict(const gc::transformer::wire_path& w);

}  // namespace gradcomp_py
