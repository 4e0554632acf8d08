#pragma once
// The CUDA side of the bindings behind plain C++ declarations, so that only the .cu files
// (device*.cu, compiled by nvcc when the extension is built with CUDA) see CUDA headers: the
// runtime pieces (memory, per-stream workspaces and reports, build information) and the
// factories of the device implementations of backend.hpp's families.
//
// A codec whose composition has GPU kernels (dense or exact top-k selection, no or residual
// feedback: `device_capable`) gets a device codec_backend from codec_impl<C>::make_device()
// and device sharded states from sharded_impl<C>::to_device(); the device calls run on a
// caller's stream, never synchronise the host, and leave what they find in a device report that
// `device_context::check` reads, or in the state's error word (docs/python.md, "CUDA tensors
// and NCCL").

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "codec.hpp"

namespace gradcomp_py {

// Device memory from cudaMalloc on `device`, freed when the last owner lets go.
std::shared_ptr<std::byte> device_alloc(int device, std::size_t bytes);

// Per Compressor: one workspace and one report per stream, and the first error any device
// call reported since the last check (a sticky word the calls latch into, in stream order).
class device_context {
 public:
  device_context();
  ~device_context();
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  struct slot {
    std::byte* workspace = nullptr;  // at least the bytes asked for, 256-byte aligned
    void* report = nullptr;          // a gradcomp::cuda::report
  };
  // The stream's workspace of at least `bytes` and its report. Growing it waits for the stream
  // and allocates: warm up before capturing a CUDA graph.
  slot get(device_stream s, std::size_t bytes);
  // Enqueued after each call: copies the call's error into the sticky word unless one is there.
  void latch(device_stream s);
  // Waits for every stream used, then raises the first error reported (gradcomp.Error), clearing it.
  void check();
  // Device calls since construction; check() runs every `interval` calls (0: only on demand).
  std::uint64_t calls = 0;
  std::uint64_t interval = 256;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// TAGC-2 (gradcomp::cuda::tagc in the padded sketch layout, so that the sketch phase's size is
// known without waiting for the device) for one rank, with its own workspace (a step carries the
// cell index from receive(0) to receive(1)) and an error word that finish_step latches the
// step's report into. Its checkpoints go through a fresh CPU state of the codec of the call.
std::unique_ptr<summable_state> make_device_tagc(const gc::tagc::config& c, std::size_t n, std::uint32_t world,
                                                 std::uint32_t rank, device_stream s);

// A summable cast (summable::cast<Q>, Q the wire type) for one rank: its residual (with
// feedback) and an error word on the device; `host`, the CPU state of the cast, keeps the step
// and describes the phase. The host checks the sizes; the device finds a received buffer whose
// padding is not zero (a misrouted shard): that receive then writes nothing.
std::unique_ptr<summable_state> make_device_cast(gc::summable::wire_type wire, bool feedback,
                                                 std::unique_ptr<summable_state> host, device_stream s);

// What the extension was built with (gradcomp.build_info()).
struct cuda_build {
  bool cuda = false;
  std::string version;        // CUDA runtime version the extension was compiled with, e.g. "13.0"
  std::string architectures;  // e.g. "90"
};
cuda_build cuda_build_info();
// Raises gradcomp.Error device_error when no CUDA runtime / device can run the kernels.
void cuda_check_device(int device);

// The compositions with GPU kernels: every registry codec whose selection is dense or exact
// top-k and whose feedback is none or residual (gradcomp::cuda's requirements).
template <class C>
struct device_capable : std::false_type {};
template <class S, class Q, class F>
struct device_capable<gc::compressor<gc::partition::chunks, S, Q, F>>
    : std::bool_constant<(std::is_same_v<S, gc::sparsify::dense> || std::is_same_v<S, gc::sparsify::topk>) &&
                         (std::is_same_v<F, gc::feedback::none> || std::is_same_v<F, gc::feedback::residual>)> {};

// Defined in device_impl.cuh, instantiated in the device*.cu files for every device_capable C
// the registry builds: the compressor's kernels, reporting into ctx; one rank's sharded state of
// it on s's device, `host` (a CPU state of the same geometry) kept as its host copy.
template <class C>
std::unique_ptr<codec_backend> make_device_codec(const C& comp, std::shared_ptr<device_context> ctx);
template <class C>
std::unique_ptr<sharded_state> make_device_sharded(const C& comp, gc::sharded::mode m, std::unique_ptr<sharded_state> host,
                                                   device_stream s);

template <class C>
std::unique_ptr<codec_backend> codec_impl<C>::make_device(std::shared_ptr<device_context> ctx) const {
#ifdef GRADCOMP_PY_CUDA
  if constexpr (device_capable<C>::value) return make_device_codec<C>(comp_, std::move(ctx));
#endif
  (void)ctx;
  return nullptr;
}

}  // namespace gradcomp_py
