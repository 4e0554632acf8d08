#pragma once
// device_codec for one composition C: gradcomp::cuda's compress / decode on the caller's stream,
// with the Compressor's device_context for workspaces and reports. Included by the device*.cu
// files, each of which instantiates make_device_codec for its slice of the codec table.

#include <gradcomp/cuda.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>

#include "codecs.hpp"
#include "device.hpp"

namespace gradcomp_py {

namespace gcu = gradcomp::cuda;

// Raises gradcomp.Error device_error for a failed runtime call.
void check_cuda(cudaError_t e, const char* what);

// Makes `device` current for the scope of a call, and restores the caller's device after.
class device_guard {
 public:
  explicit device_guard(int device);
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
};

template <class Q>
__global__ void encode_cast_kernel(const float* src, typename Q::code_type* codes, std::size_t n, float scale) {
  const typename Q::config qc{};
  const typename Q::meta m{};
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    codes[i] = Q::encode(qc, m, gc::canonical_nan(src[i] * scale), 0);
}
template <class Q>
__global__ void decode_cast_kernel(const typename Q::code_type* codes, float* dst, std::size_t n, bool add) {
  const typename Q::config qc{};
  const typename Q::meta m{};
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] = add ? gc::canonical_nan(dst[i] + Q::decode(qc, m, codes[i])) : Q::decode(qc, m, codes[i]);
}
// sticky = the first failing call's code (a report's or a gate's), in stream order.
template <class = void>
__global__ void latch_kernel(const std::uint32_t* code, std::uint32_t* sticky) {
  if (*sticky == 0 && *code != 0) *sticky = *code;
}

constexpr std::size_t round256(std::size_t b) { return (b + 255) / 256 * 256; }

// An error word's code, then cleared (waits for the stream).
inline std::uint32_t take_sticky(std::uint32_t* sticky, device_stream s) {
  const auto st = static_cast<cudaStream_t>(s.stream);
  std::uint32_t code = 0;
  check_cuda(cudaMemcpyAsync(&code, sticky, sizeof code, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize");
  if (code != 0) check_cuda(cudaMemsetAsync(sticky, 0, sizeof code, st), "cudaMemsetAsync");
  return code;
}

// One rank's sharded-path state of compressor C on a device: one allocation holds the state,
// the workspace of every call and the error word.
template <class C>
class device_sharded_impl final : public device_sharded {
  using codec_type = gcu::sharded::codec<C>;

 public:
  device_sharded_impl(const C& comp, gc::sharded::mode m, std::size_t n, std::uint32_t world, std::uint32_t rank,
                      device_stream s)
      : codec_(comp, m), device_(s.device) {
    check(codec_.validate());
    if (world == 0 || rank >= world) raise({gc::errc::invalid_argument, "sharded state needs world >= 1 and rank < world"});
    device_guard on(device_);
    state_bytes_ = round256(codec_.state_bytes(n, world, rank));
    work_bytes_ = round256(std::max(codec_.template workspace_bytes<float>(n, world),
                                    codec_.template workspace_bytes<gc::bf16_t>(n, world)));
    mem_ = device_alloc(device_, state_bytes_ + work_bytes_ + 256);
    sticky_ = reinterpret_cast<std::uint32_t*>(mem_.get() + state_bytes_ + work_bytes_);
    check_cuda(cudaMemsetAsync(sticky_, 0, sizeof *sticky_, stream(s)), "cudaMemsetAsync");
    check(codec_.make_state({mem_.get(), state_bytes_}, n, world, rank, st_, stream(s)));
  }

  int device() const override { return device_; }
  std::size_t memory_bytes() const override { return state_bytes_ + work_bytes_ + 256; }
  gc::sharded::stage at() const override { return st_.at; }
  float* sender_residual(std::uint32_t shard) const override {
    if (shard >= st_.world) raise({gc::errc::invalid_argument, "shard index outside the world"});
    return st_.send[shard].residual;
  }
  float* owner_residual() const override { return st_.owner.residual; }

  void encode(std::size_t k, const void* grad, std::size_t n, gc::dtype t, std::byte* out, std::size_t bytes,
              device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    const std::span<std::byte> o(out, bytes);
    if (k != 0) check(codec_.template encode<float>(ex, k, {}, st_, o));
    else if (t == gc::dtype::f32) check(codec_.template encode<float>(ex, k, {static_cast<const float*>(grad), n}, st_, o));
    else check(codec_.template encode<gc::bf16_t>(ex, k, {static_cast<const gc::bf16_t*>(grad), n}, st_, o));
  }
  void receive(std::size_t k, const std::byte* in, std::size_t bytes, void* out, std::size_t n, gc::dtype t,
               device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    const std::span<const std::byte> i(in, bytes);
    if (t == gc::dtype::f32) check(codec_.template receive<float>(ex, k, st_, i, {static_cast<float*>(out), n}));
    else check(codec_.template receive<gc::bf16_t>(ex, k, st_, i, {static_cast<gc::bf16_t*>(out), n}));
    latch_kernel<><<<1, 1, 0, stream(s)>>>(&st_.outcome->code, sticky_);
    check_cuda(cudaGetLastError(), "latch");
  }

  std::uint32_t take_error(device_stream s) override {
    device_guard on(device_);
    return take_sticky(sticky_, s);
  }
  std::uint64_t step(device_stream s) const override {
    device_guard on(device_);
    std::uint64_t v = 0;
    check_cuda(cudaMemcpyAsync(&v, st_.step, sizeof v, cudaMemcpyDeviceToHost, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    return v;
  }
  void download(gc::sharded::state& host, device_stream s) const override {
    device_guard on(device_);
    same_geometry(host);
    for (std::uint32_t j = 0; j < st_.world; ++j) check(gcu::download_state(st_.send[j], host.send[j], stream(s)));
    if (codec_.get_mode() == gc::sharded::mode::all_reduce) check(gcu::download_state(st_.owner, host.owner, stream(s)));
    host.step = step(s);
    host.at = st_.at;
  }
  void upload(const gc::sharded::state& host, device_stream s) override {
    device_guard on(device_);
    same_geometry(host);
    for (std::uint32_t j = 0; j < st_.world; ++j) check(gcu::upload_state(host.send[j], st_.send[j], stream(s)));
    if (codec_.get_mode() == gc::sharded::mode::all_reduce) check(gcu::upload_state(host.owner, st_.owner, stream(s)));
    check_cuda(cudaMemcpyAsync(st_.step, &host.step, sizeof host.step, cudaMemcpyHostToDevice, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    st_.at = host.at;
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  std::span<std::byte> work() const { return {mem_.get() + state_bytes_, work_bytes_}; }
  void same_geometry(const gc::sharded::state& h) const {
    if (h.size != st_.size || h.world != st_.world || h.rank != st_.rank || h.send.size() != st_.world)
      raise({gc::errc::size_mismatch, "host sharded state differs from the device state's size, world or rank"});
  }

  codec_type codec_;
  int device_;
  std::size_t state_bytes_ = 0, work_bytes_ = 0;
  std::shared_ptr<std::byte> mem_;
  std::uint32_t* sticky_ = nullptr;
  gcu::sharded::device_state st_{};
};

inline unsigned cast_grid(std::size_t n) { return static_cast<unsigned>(n == 0 ? 1 : (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096); }

template <class C>
class device_codec_impl final : public device_codec {
  using Q = typename C::quantizer;
  static constexpr bool cast = C::sparsifier::is_dense && std::is_base_of_v<gc::ungrouped_quantizer, Q> && Q::summable &&
                               Q::meta_bytes == 0;

 public:
  explicit device_codec_impl(const C& comp) : comp_(comp) { check(gcu::detail::check_quantizer_config(comp_)); }

  std::size_t payload_bytes(std::size_t n, gc::dtype t) const override {
    return t == gc::dtype::f32 ? gcu::detail::plan_on_host<C, float>(comp_, n).total.frame
                               : gcu::detail::plan_on_host<C, gc::bf16_t>(comp_, n).total.frame;
  }
  std::size_t state_bytes(std::size_t n) const override { return gcu::state_bytes(comp_, n); }

  void init_state(std::byte* mem, std::size_t n, device_stream s) const override {
    device_guard on(s.device);
    const auto st = gcu::make_state(comp_, {mem, state_bytes(n)}, n, stream(s));
    if (!st) raise(st.error());
  }
  void download(const std::byte* mem, std::size_t n, gc::state& host, device_stream s) const override {
    device_guard on(s.device);
    check(gcu::download_state(view(const_cast<std::byte*>(mem), n), host, stream(s)));
  }
  void upload(const gc::state& host, std::byte* mem, std::size_t n, device_stream s) const override {
    device_guard on(s.device);
    check(gcu::upload_state(host, view(mem, n), stream(s)));
  }

  std::size_t compress(device_context& ctx, const void* grad, std::size_t n, gc::dtype t, std::byte* state_mem,
                       std::byte* out, std::size_t out_bytes, device_stream s) const override {
    device_guard on(s.device);
    const std::size_t bytes = payload_bytes(n, t);
    if (t == gc::dtype::f32) run_compress<float>(ctx, static_cast<const float*>(grad), n, state_mem, out, out_bytes, s);
    else run_compress<gc::bf16_t>(ctx, static_cast<const gc::bf16_t*>(grad), n, state_mem, out, out_bytes, s);
    return bytes;
  }
  void decode(device_context& ctx, const std::byte* payload, std::size_t bytes, void* out, std::size_t n, gc::dtype t,
              bool add, device_stream s) const override {
    device_guard on(s.device);
    if (t == gc::dtype::f32) run_decode<float>(ctx, payload, bytes, static_cast<float*>(out), n, add, s);
    else run_decode<gc::bf16_t>(ctx, payload, bytes, static_cast<gc::bf16_t*>(out), n, add, s);
  }

  void encode_cast(const float* src, void* codes, std::size_t n, float scale, device_stream s) const override {
    if constexpr (cast) {
      device_guard on(s.device);
      encode_cast_kernel<Q><<<cast_grid(n), 256, 0, stream(s)>>>(src, static_cast<typename Q::code_type*>(codes), n, scale);
      check_cuda(cudaGetLastError(), "encode_cast");
    } else {
      (void)src, (void)codes, (void)n, (void)scale, (void)s;
      raise(gc::errc::invalid_argument, "encode_cast: this codec is not a summable cast");
    }
  }
  std::unique_ptr<device_sharded> make_sharded(gc::sharded::mode m, std::size_t n, std::uint32_t world, std::uint32_t rank,
                                               device_stream s) const override {
    return std::make_unique<device_sharded_impl<C>>(comp_, m, n, world, rank, s);
  }

  void decode_cast(const void* codes, float* dst, std::size_t n, bool add, device_stream s) const override {
    if constexpr (cast) {
      device_guard on(s.device);
      decode_cast_kernel<Q><<<cast_grid(n), 256, 0, stream(s)>>>(static_cast<const typename Q::code_type*>(codes), dst, n, add);
      check_cuda(cudaGetLastError(), "decode_cast");
    } else {
      (void)codes, (void)dst, (void)n, (void)add, (void)s;
      raise(gc::errc::invalid_argument, "decode_cast: this codec is not a summable cast");
    }
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  gcu::device_state view(std::byte* mem, std::size_t n) const {
    gcu::device_state st;
    st.size = n;
    st.step = reinterpret_cast<std::uint64_t*>(mem);
    st.residual = C::feedback::has_state ? reinterpret_cast<float*>(mem + 256) : nullptr;
    return st;
  }

  template <class T>
  void run_compress(device_context& ctx, const T* grad, std::size_t n, std::byte* state_mem, std::byte* out,
                    std::size_t out_bytes, device_stream s) const {
    const std::size_t ws = gcu::compress_workspace_bytes<T>(comp_, n);  // a loop over the chunk plan: once
    const device_context::slot slot = ctx.get(s, ws);
    const gcu::executor ex{stream(s), {slot.workspace, ws}};
    check(gcu::compress<T>(comp_, ex, std::span<const T>(grad, n), view(state_mem, n), std::span<std::byte>(out, out_bytes),
                           static_cast<gcu::report*>(slot.report)));
    ctx.latch(s);
  }
  template <class T>
  void run_decode(device_context& ctx, const std::byte* payload, std::size_t bytes, T* out, std::size_t n, bool add,
                  device_stream s) const {
    const std::size_t ws = gcu::decode_workspace_bytes<T>(comp_, n, gcu::max_frames(bytes));
    const device_context::slot slot = ctx.get(s, ws);
    const gcu::executor ex{stream(s), {slot.workspace, ws}};
    const std::span<const std::byte> p(payload, bytes);
    auto* rep = static_cast<gcu::report*>(slot.report);
    check(add ? gcu::accumulate<T>(comp_, ex, p, std::span<T>(out, n), rep)
              : gcu::decompress<T>(comp_, ex, p, std::span<T>(out, n), rep));
    ctx.latch(s);
  }

  C comp_;
};

template <class C>
std::unique_ptr<device_codec> make_device_codec(const C& comp) {
  return std::make_unique<device_codec_impl<C>>(comp);
}

// make_device_codec of every composition of slice Here of the codec table that has GPU kernels,
// as function pointers: GRADCOMP_PY_DEVICE_CODECS(slice) defines that list in a device*.cu
// file, which instantiates them all there.
template <class C>
constexpr auto device_codec_of() {
  if constexpr (device_capable<C>::value) return std::tuple{&make_device_codec<C>};
  else return std::tuple<>{};
}
template <class... C>
constexpr auto device_codecs_of(type_list<C...>) {
  return std::tuple_cat(device_codec_of<C>()...);
}
template <codec_slice Here>
constexpr auto device_codecs() {
  return std::apply(
      [](const auto&... r) {
        return std::tuple_cat(device_codecs_of(typename std::remove_cvref_t<decltype(r)>::compositions{})...);
      },
      codec_table<Here>());
}
#define GRADCOMP_PY_DEVICE_CODECS(slice) extern const auto slice##_device_codecs = device_codecs<codec_slice::slice>();

}  // namespace gradcomp_py
