#pragma once
// The CUDA side of the bindings behind plain C++ declarations, so that only the .cu files
// (device*.cu, compiled by nvcc when the extension is built with CUDA) see CUDA headers.
//
// A codec whose composition has GPU kernels (dense or exact top-k selection, no or residual
// feedback: `device_capable`) gets a `device_codec` from codec_impl<C>::make_device(); the
// device calls run on a caller's stream, never synchronise the host, and leave what they
// find in a device report that `device_context::check` reads (docs/python.md, "CUDA
// tensors and NCCL").

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "codec.hpp"

namespace gradcomp_py {

// Where a device call runs: the CUDA device and the stream (a cudaStream_t).
struct device_stream {
  int device = 0;
  void* stream = nullptr;
};

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

// A device state whose steps latch what the device finds into an error word of its own.
class device_error_word {
 public:
  virtual ~device_error_word() = default;
  virtual int device() const = 0;
  // The first error latched since the last call, then cleared (synchronous).
  virtual std::uint32_t take_error(device_stream s) = 0;
};

// One rank's sharded-path state on a CUDA device (gradcomp::cuda::sharded::codec<C>), with its
// own workspace and error word: receive() latches its report (a bad slot: the rest of that call
// does nothing and the output is untouched, but the step advances, as the host cannot know).
class device_sharded : public device_error_word {
 public:
  virtual std::size_t memory_bytes() const = 0;  // state, workspace and error word
  virtual gc::sharded::stage at() const = 0;
  virtual float* sender_residual(std::uint32_t shard) const = 0;  // null without feedback
  virtual float* owner_residual() const = 0;
  // Queued on s; argument errors raise at once.
  virtual void encode(std::size_t k, const void* grad, std::size_t n, gc::dtype t, std::byte* out, std::size_t bytes,
                      device_stream s) = 0;
  virtual void receive(std::size_t k, const std::byte* in, std::size_t bytes, void* out, std::size_t n, gc::dtype t,
                       device_stream s) = 0;
  // Synchronous: the step; the state to and from a host state of the same geometry.
  virtual std::uint64_t step(device_stream s) const = 0;
  virtual void download(gc::sharded::state& host, device_stream s) const = 0;
  virtual void upload(const gc::sharded::state& host, device_stream s) = 0;
};

// One compressor's GPU kernels (gradcomp::cuda), for the buffers of one State.
class device_codec {
 public:
  virtual ~device_codec() = default;
  // Exact bytes compress writes for n elements of t (the device path's frames have a fixed
  // size: sparse frames carry u32 index lists).
  virtual std::size_t payload_bytes(std::size_t n, gc::dtype t) const = 0;
  virtual std::size_t state_bytes(std::size_t n) const = 0;
  // Zeroes a state in `mem` (state_bytes(n), 256-byte aligned), in stream order.
  virtual void init_state(std::byte* mem, std::size_t n, device_stream s) const = 0;
  // Synchronous copies between a device state and a host state of the same size.
  virtual void download(const std::byte* mem, std::size_t n, gc::state& host, device_stream s) const = 0;
  virtual void upload(const gc::state& host, std::byte* mem, std::size_t n, device_stream s) const = 0;
  // Returns the payload bytes; errors found on the device go to ctx's report.
  virtual std::size_t compress(device_context& ctx, const void* grad, std::size_t n, gc::dtype t, std::byte* state_mem,
                               std::byte* out, std::size_t out_bytes, device_stream s) const = 0;
  virtual void decode(device_context& ctx, const std::byte* payload, std::size_t bytes, void* out, std::size_t n,
                      gc::dtype t, bool add, device_stream s) const = 0;
  // Summable casts: codes = encode(src * scale); dst (+)= decode(codes).
  virtual void encode_cast(const float* src, void* codes, std::size_t n, float scale, device_stream s) const = 0;
  virtual void decode_cast(const void* codes, float* dst, std::size_t n, bool add, device_stream s) const = 0;
  // The sharded path of this compressor: one rank's state on s's device.
  virtual std::unique_ptr<device_sharded> make_sharded(gc::sharded::mode m, std::size_t n, std::uint32_t world,
                                                       std::uint32_t rank, device_stream s) const = 0;
};

// One rank's TAGC state on a CUDA device (gradcomp::cuda::tagc in the padded sketch layout, so
// that the sketch phase's size is known without waiting for the device), with its own workspace
// (a step carries the cell index from receive(0) to receive(1)) and a sticky error word that
// finish_step latches the step's report into.
class device_tagc : public device_error_word {
 public:
  struct report {
    std::uint32_t rows = 0;                      // r of the last step
    std::uint32_t items = 0, peeled = 0, rounds = 0;  // the last receive(1)'s peel
    std::uint64_t step = 0;
  };
  virtual std::size_t memory_bytes() const = 0;  // state, workspace and error word
  virtual gc::summable::phase describe(std::size_t k) const = 0;
  virtual std::size_t max_phase_bytes() const = 0;
  virtual float* residual() const = 0;
  virtual float* thresholds() const = 0;
  // Queued on s; argument errors raise at once, data errors land in the step's report.
  virtual void encode(std::size_t k, const float* grad, std::size_t n, std::byte* out, std::size_t bytes, device_stream s) = 0;
  virtual void receive(std::size_t k, const std::byte* in, std::size_t bytes, float* out, std::size_t n, device_stream s) = 0;
  virtual void finish_step(device_stream s) = 0;
  // Synchronous: the last step's report; the state to and from a host state of the same size,
  // world and rank.
  virtual report read(device_stream s) const = 0;
  virtual void download(gc::tagc::state& host, device_stream s) const = 0;
  virtual void upload(const gc::tagc::state& host, device_stream s) = 0;
};
std::unique_ptr<device_tagc> make_device_tagc(const gc::tagc::config& c, std::size_t n, std::uint32_t world,
                                              std::uint32_t rank, device_stream s);

// One rank's summable cast (summable::cast<Q>, Q the wire type) on a CUDA device: its residual
// (with feedback) and an error word. The host checks the sizes; the device finds a received
// buffer whose padding is not zero (a misrouted shard): that receive then writes nothing.
class device_cast : public device_error_word {
 public:
  virtual std::size_t memory_bytes() const = 0;
  virtual float* residual() const = 0;  // null without feedback
  // out: `count` codes, the n values then zeros.
  virtual void encode(const float* grad, std::size_t n, std::byte* out, std::size_t count, device_stream s) = 0;
  // in: `filled` codes, the first n decoded into out, the rest checked to be zero.
  virtual void receive(const std::byte* in, std::size_t filled, float* out, std::size_t n, device_stream s) = 0;
};
std::unique_ptr<device_cast> make_device_cast(gc::summable::wire_type wire, bool feedback, std::size_t n, device_stream s);

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

// Defined in the device*.cu files for every device_capable C the registry builds.
template <class C>
std::unique_ptr<device_codec> make_device_codec(const C& comp);

template <class C>
std::unique_ptr<device_codec> codec_impl<C>::make_device() const {
#ifdef GRADCOMP_PY_CUDA
  if constexpr (device_capable<C>::value) return make_device_codec<C>(comp_);
#endif
  return nullptr;
}

}  // namespace gradcomp_py
