#pragma once
// device_codec for one composition C: gradcomp::cuda's compress / decode on the caller's stream,
// with the Compressor's device_context for workspaces and reports. Included by the device*.cu
// files, each of which instantiates make_device_codec for its share of the registry's codecs.

#include <gradcomp/cuda.cuh>

#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>

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

// Explicit instantiations of make_device_codec for a quantizer Q under selection S, with and
// without feedback (the registry's build_with_feedback makes both).
template <class S, class Q>
using without_feedback = gc::compressor<gc::partition::chunks, S, Q, gc::feedback::none>;
template <class S, class Q>
using with_feedback = gc::compressor<gc::partition::chunks, S, Q, gc::feedback::residual>;
#define GRADCOMP_PY_DEVICE_CODECS(S, Q)                                                                        \
  template std::unique_ptr<device_codec> make_device_codec<without_feedback<S, Q>>(const without_feedback<S, Q>&); \
  template std::unique_ptr<device_codec> make_device_codec<with_feedback<S, Q>>(const with_feedback<S, Q>&);

}  // namespace gradcomp_py
