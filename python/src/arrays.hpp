#pragma once
// Array checks shared by the bindings: any DLPack / buffer-protocol array (torch tensors, NumPy
// arrays), used in place, never copied.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
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

// The CUDA device of a torch.device, a device string ("cuda:1") or an index; -1 for the CPU.
inline int parse_device(nb::handle d) {
  nb::object torch = nb::module_::import_("torch");
  nb::object dev = torch.attr("device")(d);
  const std::string type = nb::cast<std::string>(dev.attr("type"));
  if (type == "cpu") return -1;
  if (type != "cuda") throw nb::value_error(("device: 'cpu' or 'cuda' expected, not '" + type + "'").c_str());
  if (!nb::cast<bool>(torch.attr("cuda").attr("is_available")()))
    raise(gc::errc::device_error, "no CUDA device is available to torch");
  nb::object index = dev.attr("index");
  return index.is_none() ? nb::cast<int>(torch.attr("cuda").attr("current_device")()) : nb::cast<int>(index);
}

// Where a call on arrays of CUDA device `device` runs: torch's current stream of that device.
inline device_stream current_stream(int device) {
  nb::object cuda = nb::module_::import_("torch").attr("cuda");
  const auto handle = nb::cast<std::uintptr_t>(cuda.attr("current_stream")(device).attr("cuda_stream"));
  return {device, reinterpret_cast<void*>(handle)};
}

// Where a call on arrays of `device` runs: the CPU (-1), or the device's current stream.
inline device_stream stream_of(int device) { return device < 0 ? device_stream{} : current_stream(device); }

// Where a new state goes: the CPU (-1), or the current stream of a CUDA device that exists
// (gradcomp.Error device_error otherwise, before torch is asked for its stream).
inline device_stream placement(int device) {
  if (device >= 0) cuda_check_device(device);
  return stream_of(device);
}

// The one device of a call's arrays: -1 when all are on the CPU, the CUDA device when all are
// on it; anything else is a ValueError that names both.
template <class... A>
int call_device(const char* call, const A&... arrays) {
  int device = -2;
  std::string first;
  auto one = [&](const auto& a) {
    const int d = on_cuda(a) ? a.device_id() : a.device_type() == nb::device::cpu::value ? -1 : -3;
    if (d == -3) throw nb::value_error((std::string(call) + ": arrays must be on the CPU or a CUDA device").c_str());
    if (device == -2) device = d;
    else if (d != device)
      throw nb::value_error((std::string(call) + ": all arrays of one call must be on one device (found " +
                             (device < 0 ? std::string("cpu") : "cuda:" + std::to_string(device)) + " and " +
                             (d < 0 ? std::string("cpu") : "cuda:" + std::to_string(d)) + ")")
                                .c_str());
  };
  (one(arrays), ...);
  return device;
}

// The bytes of a contiguous byte array (payloads, slots) of a call on `device`: on a CUDA
// device they start on 8 bytes.
template <class A>
std::span<std::byte> payload_view(const A& a, const char* what, int device) {
  check_contiguous(a, what);
  if (a.itemsize() != 1) throw nb::type_error((std::string(what) + ": payloads are uint8 (or int8) arrays").c_str());
  auto* p = static_cast<std::byte*>(const_cast<void*>(a.data()));
  if (device >= 0 && reinterpret_cast<std::uintptr_t>(p) % 8 != 0)
    throw nb::value_error((std::string(what) + ": CUDA payloads must start on an 8-byte boundary").c_str());
  return {p, a.size()};
}

// The bytes of a contiguous array of element size `elem` (a phase buffer: int32 for u32 words,
// bfloat16 / float32 / float16 cells).
template <class A>
std::span<std::byte> phase_view(const A& a, const char* what, std::size_t elem) {
  check_contiguous(a, what);
  if (a.itemsize() != elem)
    throw nb::type_error((std::string(what) + ": element size differs from the phase's type (u32: int32, bf16: bfloat16, f32: float32)").c_str());
  return {static_cast<std::byte*>(const_cast<void*>(a.data())), a.size() * elem};
}

// A contiguous float32 array as a span, on whichever device the call checked.
template <class A>
std::span<float> floats_of(const A& a, const char* what) {
  check_contiguous(a, what);
  if (a.dtype() != nb::dtype<float>()) throw nb::type_error((std::string(what) + ": float32 expected").c_str());
  return {static_cast<float*>(const_cast<void*>(a.data())), a.size()};
}

// The same for the calls that take CPU arrays only.
template <class A>
std::span<std::byte> byte_view(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  return payload_view(a, what, -1);
}
template <class A>
std::span<float> float_span(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  return floats_of(a, what);
}
// The bytes of a contiguous CPU array of any element type.
template <class A>
std::span<std::byte> raw_view(const A& a, const char* what) {
  check_cpu_contiguous(a, what);
  return {static_cast<std::byte*>(const_cast<void*>(a.data())), a.size() * a.itemsize()};
}

// The device states a codec made (TAGC, sharded), for its check(): each latches its steps'
// errors into its own error word; check() reads and clears every word. CPU states raise at once
// and are not kept.
struct device_checks {
  std::mutex lock;
  std::vector<std::weak_ptr<backend_state>> states;
  std::uint64_t steps = 0;       // steps of device states
  std::uint64_t interval = 256;  // check() every `interval` of them (0: on demand only)

  void add(const std::shared_ptr<backend_state>& d) {
    if (d->device() < 0) return;
    std::lock_guard hold(lock);
    std::erase_if(states, [](const auto& w) { return w.expired(); });
    states.push_back(d);
  }
  void check() {
    std::vector<std::shared_ptr<backend_state>> live;
    {
      std::lock_guard hold(lock);
      for (const auto& w : states)
        if (auto d = w.lock()) live.push_back(std::move(d));
    }
    std::uint32_t first = 0;
    for (const auto& d : live) {
      const std::uint32_t code = d->take_error(current_stream(d->device()));
      if (first == 0) first = code;
    }
    if (first != 0) raise(static_cast<gc::errc>(first), "reported by the device for a step since the last check");
  }
  // After a state's step: a device state's steps run check() every `interval`.
  void stepped(const backend_state& st) {
    if (st.device() < 0) return;
    if (++steps, interval != 0 && steps % interval == 0) check();
  }
};

// A NumPy view of host memory (torch.from_numpy wraps it without a copy either).
inline nb::ndarray<nb::numpy, float, nb::ndim<1>> numpy_view(float_block b) {
  return nb::ndarray<nb::numpy, float, nb::ndim<1>>(b.data, {b.size}, nb::handle());
}
inline nb::ndarray<nb::numpy, float, nb::ndim<1>> float_view(std::vector<float>& v) { return numpy_view({v.data(), v.size()}); }
// A state's array without a copy: a NumPy view of host memory, a torch tensor of device memory.
inline nb::object float_array(float_block b) {
  if (b.device < 0) return nb::cast(numpy_view(b), nb::rv_policy::reference);
  return nb::cast(nb::ndarray<nb::pytorch, float, nb::ndim<1>>(b.data, {b.size}, nb::handle(), {}, nb::dtype<float>(),
                                                               nb::device::cuda::value, b.device),
                  nb::rv_policy::reference);
}

// A state's checkpoint calls (sharded_state, summable_state) with the codec of the call: its
// bytes; a restore from them, or from every saved rank's (restore_elastic); the GIL released.
inline std::span<const std::byte> bytes_of(const nb::bytes& b) { return {static_cast<const std::byte*>(b.data()), b.size()}; }
template <class S, class C>
nb::bytes checkpoint_of(S& st, const C& c) {
  const std::vector<std::byte> b = st.checkpoint(c, stream_of(st.device()));
  return nb::bytes(b.data(), b.size());
}
template <class S, class C>
void load_from(S& st, const C& c, const nb::bytes& data) {
  const device_stream s = stream_of(st.device());
  nb::gil_scoped_release unlocked;
  st.load_checkpoint(c, bytes_of(data), s);
}
template <class S, class C>
void restore_from(S& st, const C& c, const std::vector<nb::bytes>& saved) {
  std::vector<std::span<const std::byte>> views;
  for (const nb::bytes& b : saved) views.push_back(bytes_of(b));
  const device_stream s = stream_of(st.device());
  nb::gil_scoped_release unlocked;
  st.restore_elastic(c, views, s);
}

// Keyword options to the registry's option values, and back; ", key=repr(value)" of each
// keyword, for reprs.
options to_options(const nb::kwargs& kw);
nb::dict to_dict(const options& o);
std::string kwargs_repr(const nb::kwargs& kw);

// torch.float32 / torch.bfloat16 (or any object whose str ends so) to the library's dtype.
gc::dtype parse_dtype(nb::handle h);

// The module's parts, in the order they are bound (module.cpp).
void bind_core(nb::module_& m);
void bind_state(nb::module_& m);
void bind_compressor(nb::module_& m);
void bind_summable(nb::module_& m);
void bind_sharded(nb::module_& m);
void bind_planner(nb::module_& m);
void bind_localsteps(nb::module_& m);
// A planner path as a dict (planner.cpp), for Compressor.measure_path.
nb::dict wire_path_dict(const gc::model::wire_path& w);

}  // namespace gradcomp_py
