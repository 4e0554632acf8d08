#pragma once
// Shared pieces of the CUDA backend: the executor (stream + caller-owned workspace), the
// report a call writes to device memory, device-resident compressor state, the tile geometry
// every kernel uses, and small launch helpers.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/status.hpp"

namespace gradcomp::cuda {

// Where a call runs: a stream, and device workspace the caller allocated once after asking
// for its size (compress_workspace_bytes / decode_workspace_bytes). Calls never allocate.
struct executor {
  cudaStream_t stream = nullptr;
  std::span<std::byte> workspace{};  // device memory, 256-byte aligned
};

// The outcome of a call, written to device memory in stream order. Asynchronous calls never
// read it on the host; the convenience overloads synchronise and return it.
struct report {
  std::uint64_t bytes = 0;  // compress: payload bytes written; decode: payload bytes read
  std::uint32_t code = 0;   // errc::ok, or the failure kind (the same errc as the CPU backend)
  std::uint32_t reserved = 0;
  GRADCOMP_HD constexpr errc error() const { return static_cast<errc>(code); }
};

// Step counter and residual of one compressor, in caller-owned device memory (state_bytes(),
// make_state()). The step lives on the device so that a captured CUDA graph advances it on
// every replay.
struct device_state {
  std::size_t size = 0;             // gradient elements this state serves
  std::uint64_t* step = nullptr;    // one u64, advanced once per compressed buffer
  float* residual = nullptr;        // `size` floats when the feedback keeps state, else null
  float* transformed = nullptr;     // 2 x `size` floats (the transformed gradient, scratch) when
                                    // the composition has a transform, else null
};

namespace detail {

// --- Tile geometry. A frame section is processed in tiles of tile_bytes: a block stages the
// tile in shared memory, stores it with coalesced 32-bit writes and checksums it, each thread
// taking a piece of piece_bytes (see crc32c.cuh).
inline constexpr unsigned threads = 256;
inline constexpr unsigned warps = threads / 32;
inline constexpr std::uint32_t tile_bytes = 32768;
inline constexpr std::uint32_t tile_words = tile_bytes / 4;
inline constexpr std::uint32_t piece_bytes = tile_bytes / threads;  // 128
inline constexpr std::uint32_t piece_words = piece_bytes / 4;       // 32
// Staged words are padded by one word per 32 so that thread t reading word i of its piece
// hits bank (t + i) % 32: no bank conflicts in the checksum loop.
inline constexpr std::uint32_t stage_words = tile_words + tile_words / 32;
GRADCOMP_HD constexpr std::uint32_t pad(std::uint32_t w) { return w + (w >> 5); }

inline constexpr std::uint32_t select_tile = 32768;  // elements per top-k selection tile
inline constexpr std::uint32_t apply_tile = 8192;    // output elements per decode tile
inline constexpr unsigned max_grid = 8192;           // kernels loop over tiles beyond this
inline constexpr std::uint32_t no_frame = 0xffffffffu;

GRADCOMP_HD constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }
GRADCOMP_HD constexpr std::uint64_t min_u64(std::uint64_t a, std::uint64_t b) { return a < b ? a : b; }
GRADCOMP_HD constexpr std::uint64_t max_u64(std::uint64_t a, std::uint64_t b) { return a > b ? a : b; }
inline unsigned grid_for(std::uint64_t tiles) {
  return static_cast<unsigned>(tiles < max_grid ? (tiles == 0 ? 1 : tiles) : max_grid);
}

inline constexpr std::size_t align_up(std::size_t n) { return (n + 255u) & ~std::size_t{255}; }

// Device bytes of a transform's two fp32 buffers for n values (the transformed values and
// their scratch; none without a transform).
template <class C>
constexpr std::size_t transform_bytes(std::size_t n) {
  return C::transformed ? 2 * align_up(4 * n) : 0;
}

// Cuts a workspace into 256-byte aligned arrays. With a null base it only adds up the sizes,
// so the size query and the call share one layout function.
class carver {
 public:
  explicit carver(std::byte* base) : base_(base) {}
  template <class T>
  T* take(std::size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += align_up(count * sizeof(T));
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// Per-call bookkeeping at the start of the workspace, reset by each call.
struct control {
  std::uint32_t error;          // errc found by a check kernel; later kernels then do nothing
  std::uint32_t mixed;          // decode: frames of different source dtypes (ordered fallback)
  std::uint64_t step;           // compress: the step written into every header
  std::uint64_t frames;         // decode: frames found by the walk
  std::uint64_t body_tiles;     // decode: checksum tiles over all frame bodies
  std::uint32_t walk_error;     // decode: what stopped the walk early, if anything
  std::uint32_t element_bytes;  // decode: source element bytes of the first frame
};

// A CUDA runtime failure, with the runtime's (static) message as the detail.
inline status cuda_status(cudaError_t e) {
  return e == cudaSuccess ? status{} : status{errc::device_error, cudaGetErrorString(e)};
}

inline bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// Waits for the stream and returns the report a call wrote (the convenience overloads).
inline status wait_for(const report* device, cudaStream_t stream, report& r) {
  cudaError_t e = cudaMemcpyAsync(&r, device, sizeof r, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return cuda_status(e);
  if (r.error() != errc::ok) return {r.error(), "reported by the device"};
  return {};
}

}  // namespace detail
}  // namespace gradcomp::cuda
