// The bindings' CUDA runtime pieces (device.hpp): device memory, per-stream workspaces and
// reports, the sticky error word, build information; and the dense casts' device codecs.

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "device_impl.cuh"

namespace gradcomp_py {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise(gc::errc::device_error, std::string(what) + ": " + cudaGetErrorString(e));
}

device_guard::device_guard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
}
device_guard::~device_guard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

std::shared_ptr<std::byte> device_alloc(int device, std::size_t bytes) {
  device_guard on(device);
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes == 0 ? 256 : bytes), "cudaMalloc");
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [device](std::byte* q) {
    int was = -1;
    cudaGetDevice(&was);
    cudaSetDevice(device);
    cudaFree(q);
    if (was >= 0) cudaSetDevice(was);
  });
}

struct device_context::impl {
  struct stream_space {
    std::shared_ptr<std::byte> workspace;
    std::size_t bytes = 0;
    std::shared_ptr<std::byte> control;  // a report, then the sticky word
  };
  std::mutex lock;
  std::map<std::pair<int, void*>, stream_space> streams;  // by device and stream (every device's default stream is 0)
};

device_context::device_context() : impl_(std::make_unique<impl>()) {}
device_context::~device_context() = default;

device_context::slot device_context::get(device_stream s, std::size_t bytes) {
  std::lock_guard hold(impl_->lock);
  auto& space = impl_->streams[{s.device, s.stream}];
  if (!space.control) {
    space.control = device_alloc(s.device, 256);
    check_cuda(cudaMemsetAsync(space.control.get(), 0, 256, static_cast<cudaStream_t>(s.stream)), "cudaMemsetAsync");
  }
  if (space.bytes < bytes) {
    // The old workspace may still be in use by work queued on the stream.
    check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream)), "cudaStreamSynchronize");
    space.workspace = device_alloc(s.device, bytes);
    space.bytes = bytes;
  }
  ++calls;
  return {space.workspace.get(), space.control.get()};
}

void device_context::latch(device_stream s) {
  std::byte* control = nullptr;
  {
    std::lock_guard hold(impl_->lock);
    control = impl_->streams.at({s.device, s.stream}).control.get();
  }
  latch_kernel<><<<1, 1, 0, static_cast<cudaStream_t>(s.stream)>>>(&reinterpret_cast<const gcu::report*>(control)->code,
                                                           reinterpret_cast<std::uint32_t*>(control + 64));
  check_cuda(cudaGetLastError(), "latch");
  if (interval != 0 && calls % interval == 0) check();
}

void device_context::check() {
  std::uint32_t first = 0;
  {
    std::lock_guard hold(impl_->lock);
    for (auto& [key, space] : impl_->streams) {
      device_guard on(key.first);
      auto* sticky = reinterpret_cast<std::uint32_t*>(space.control.get() + 64);
      std::uint32_t code = 0;
      const auto st = static_cast<cudaStream_t>(key.second);
      check_cuda(cudaMemcpyAsync(&code, sticky, sizeof code, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
      check_cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize");
      if (code != 0) {
        check_cuda(cudaMemsetAsync(sticky, 0, sizeof code, st), "cudaMemsetAsync");
        if (first == 0) first = code;
      }
    }
  }
  if (first != 0)
    raise(static_cast<gc::errc>(first), "reported by the device for a CUDA call since the last check");
}

cuda_build cuda_build_info() {
  cuda_build b;
  b.cuda = true;
  b.version = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  b.architectures = GRADCOMP_PY_CUDA_ARCHITECTURES;
  return b;
}

void cuda_check_device(int device) {
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    raise(gc::errc::device_error, "CUDA device " + std::to_string(device) + " does not exist");
}

// The GPU kernels of the codec table's dense slice: casts, fp8 and integer blocks.
GRADCOMP_PY_DEVICE_CODECS(dense)

}  // namespace gradcomp_py
