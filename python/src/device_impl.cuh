#pragma once
// The device implementations of backend.hpp's families for one composition C:
// device_codec_impl<C> (a Compressor's codec_backend: gradcomp::cuda's compress / decode on the
// caller's stream, with the Compressor's device_context for workspaces and reports), its states
// (device_codec_state<C>) and one rank's sharded state (device_sharded_state<C>). Included by the
// device*.cu files, each of which instantiates make_device_codec and make_device_sharded for its
// slice of the codec table.

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

// One rank's sharded state of compressor C on a device: one allocation holds the state, the
// workspace of every call and the error word; the CPU state it was made from is its host copy
// (geometry, phases, checkpoints).
template <class C>
class device_sharded_state final : public sharded_state {
  using codec_type = gcu::sharded::codec<C>;

 public:
  device_sharded_state(const C& comp, gc::sharded::mode m, std::unique_ptr<sharded_state> host, device_stream s)
      : codec_(comp, m), device_(s.device), host_(std::move(host)), image_(image_of<gc::sharded::state>(*host_)) {
    grad_type = host_->grad_type;
    identity = host_->identity;
    check(codec_.validate());
    const std::size_t n = host_->size();
    const std::uint32_t world = host_->world(), rank = host_->rank();
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
  std::size_t device_bytes() const override { return state_bytes_ + work_bytes_ + 256; }
  std::size_t size() const override { return host_->size(); }
  std::uint32_t world() const override { return host_->world(); }
  std::uint32_t rank() const override { return host_->rank(); }
  gc::sharded::stage at() const override { return st_.at; }
  gc::sharded::phase describe(const sharded_codec& c, std::size_t k) const override { return host_->describe(c, k); }
  float_block sender_residual(std::uint32_t shard) override {
    if (shard >= st_.world) raise({gc::errc::invalid_argument, "shard index outside the world"});
    return residual_of(st_.send[shard].residual, shard);
  }
  float_block owner_residual() override { return residual_of(st_.owner.residual, st_.rank); }

  void encode(const sharded_codec&, std::size_t k, const void* grad, std::size_t n, std::span<std::byte> out,
              device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (k != 0) check(codec_.template encode<float>(ex, k, {}, st_, out));
    else if (grad_type == gc::dtype::f32) check(codec_.template encode<float>(ex, k, {static_cast<const float*>(grad), n}, st_, out));
    else check(codec_.template encode<gc::bf16_t>(ex, k, {static_cast<const gc::bf16_t*>(grad), n}, st_, out));
  }
  void receive(const sharded_codec&, std::size_t k, std::span<const std::byte> in, void* out, std::size_t n, gc::dtype t,
               device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (t == gc::dtype::f32) check(codec_.template receive<float>(ex, k, st_, in, {static_cast<float*>(out), n}));
    else check(codec_.template receive<gc::bf16_t>(ex, k, st_, in, {static_cast<gc::bf16_t*>(out), n}));
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

  // The host copy's checkpoint after a download; a restore into the host copy, uploaded only
  // when it succeeds (the state is unchanged otherwise).
  std::vector<std::byte> checkpoint(const sharded_codec& c, device_stream s) override {
    download(s);
    return host_->checkpoint(c, s);
  }
  void load_checkpoint(const sharded_codec& c, std::span<const std::byte> in, device_stream s) override {
    host_->load_checkpoint(c, in, s);
    upload(s);
  }
  void restore_elastic(const sharded_codec& c, std::span<const std::span<const std::byte>> saved, device_stream s) override {
    host_->restore_elastic(c, saved, s);
    upload(s);
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  std::span<std::byte> work() const { return {mem_.get() + state_bytes_, work_bytes_}; }
  // A residual of shard j's size on the device (none without feedback).
  float_block residual_of(float* p, std::uint32_t j) const {
    return {p, p ? gc::summable::shard_of(st_.size, st_.world, j).count : 0, device_};
  }
  void same_geometry(const gc::sharded::state& h) const {
    if (h.size != st_.size || h.world != st_.world || h.rank != st_.rank || h.send.size() != st_.world)
      raise({gc::errc::size_mismatch, "host sharded state differs from the device state's size, world or rank"});
  }
  void download(device_stream s) {
    device_guard on(device_);
    gc::sharded::state& host = image_;
    same_geometry(host);
    for (std::uint32_t j = 0; j < st_.world; ++j) check(gcu::download_state(st_.send[j], host.send[j], stream(s)));
    if (codec_.get_mode() == gc::sharded::mode::all_reduce) check(gcu::download_state(st_.owner, host.owner, stream(s)));
    host.step = step(s);
    host.at = st_.at;
  }
  void upload(device_stream s) {
    device_guard on(device_);
    const gc::sharded::state& host = image_;
    same_geometry(host);
    for (std::uint32_t j = 0; j < st_.world; ++j) check(gcu::upload_state(host.send[j], st_.send[j], stream(s)));
    if (codec_.get_mode() == gc::sharded::mode::all_reduce) check(gcu::upload_state(host.owner, st_.owner, stream(s)));
    check_cuda(cudaMemcpyAsync(st_.step, &host.step, sizeof host.step, cudaMemcpyHostToDevice, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    st_.at = host.at;
  }

  codec_type codec_;
  int device_;
  std::unique_ptr<sharded_state> host_;
  gc::sharded::state& image_;  // host_'s library state
  std::size_t state_bytes_ = 0, work_bytes_ = 0;
  std::shared_ptr<std::byte> mem_;
  std::uint32_t* sticky_ = nullptr;
  gcu::sharded::device_state st_{};
};

inline unsigned cast_grid(std::size_t n) { return static_cast<unsigned>(n == 0 ? 1 : (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096); }

// A Compressor's state of compressor C on a device: the step and the residual in one
// allocation (device_codec_impl<C>::view), the CPU state it was made from as its host copy
// (checkpoints, thresholds).
template <class C>
class device_codec_state final : public codec_state {
 public:
  device_codec_state(const C& comp, std::unique_ptr<cpu_codec_state> host, device_stream s)
      : codec_state(host->codec_id, host->codec), comp_(comp), device_(s.device), host_(std::move(host)) {
    device_guard on(device_);
    bytes_ = gcu::state_bytes(comp_, size());
    mem_ = device_alloc(device_, bytes_);
    const auto st = gcu::make_state(comp_, {mem_.get(), bytes_}, size(), stream(s));
    if (!st) raise(st.error());
  }

  int device() const override { return device_; }
  std::size_t device_bytes() const override { return bytes_; }
  std::size_t size() const override { return host_->size(); }
  std::uint64_t step(device_stream s) override {
    download(s);
    return host_->st.step;
  }
  void set_step(std::uint64_t v, device_stream s) override {
    download(s);
    host_->st.step = v;
    upload(host_->st, s);
  }
  float_block residual() override {
    return {reinterpret_cast<float*>(mem_.get() + 256), host_->st.residual.empty() ? 0 : size(), device_};
  }
  float_block thresholds() override { return host_->thresholds(); }
  std::vector<std::byte> checkpoint(device_stream s) override {
    download(s);
    return host_->checkpoint(s);
  }
  void load_checkpoint(std::span<const std::byte> in, device_stream s) override {
    gc::state loaded = host_->loaded(in);
    upload(loaded, s);
    host_->st = std::move(loaded);
  }

  // The library's view of the memory: the step, then (with feedback) the residual at 256 bytes.
  gcu::device_state view() const {
    gcu::device_state st;
    st.size = size();
    st.step = reinterpret_cast<std::uint64_t*>(mem_.get());
    st.residual = C::feedback::has_state ? reinterpret_cast<float*>(mem_.get() + 256) : nullptr;
    return st;
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  void download(device_stream s) {
    device_guard on(device_);
    check(gcu::download_state(view(), host_->st, stream(s)));
  }
  void upload(const gc::state& host, device_stream s) {
    device_guard on(device_);
    check(gcu::upload_state(host, view(), stream(s)));
  }

  C comp_;
  int device_;
  std::unique_ptr<cpu_codec_state> host_;
  std::size_t bytes_ = 0;
  std::shared_ptr<std::byte> mem_;
};

template <class C>
class device_codec_impl final : public codec_backend {
  using Q = typename C::quantizer;
  static constexpr bool cast = C::sparsifier::is_dense && std::is_base_of_v<gc::ungrouped_quantizer, Q> && Q::summable &&
                               Q::meta_bytes == 0;

 public:
  device_codec_impl(const C& comp, std::shared_ptr<device_context> ctx) : comp_(comp), ctx_(std::move(ctx)) {
    check(gcu::detail::check_quantizer_config(comp_));
  }

  std::unique_ptr<codec_state> make_state(std::unique_ptr<cpu_codec_state> host, device_stream s) const override {
    return std::make_unique<device_codec_state<C>>(comp_, std::move(host), s);
  }
  void check_state(codec_state& st, std::size_t n) const override { (void)own(st, n); }

  // The device path's frames have a fixed size (sparse frames carry u32 index lists): the bytes
  // returned are known on the host.
  std::size_t compress(const void* grad, std::size_t n, gc::dtype t, codec_state& st, std::span<std::byte> out,
                       device_stream s) const override {
    const gcu::device_state v = own(st, n).view();
    device_guard on(s.device);
    if (t == gc::dtype::f32) {
      run_compress<float>(static_cast<const float*>(grad), n, v, out, s);
      return gcu::detail::plan_on_host<C, float>(comp_, n).total.frame;
    }
    run_compress<gc::bf16_t>(static_cast<const gc::bf16_t*>(grad), n, v, out, s);
    return gcu::detail::plan_on_host<C, gc::bf16_t>(comp_, n).total.frame;
  }
  void decode(std::span<const std::byte> payload, void* out, std::size_t n, gc::dtype t, bool add,
              device_stream s) const override {
    device_guard on(s.device);
    if (t == gc::dtype::f32) run_decode<float>(payload, static_cast<float*>(out), n, add, s);
    else run_decode<gc::bf16_t>(payload, static_cast<gc::bf16_t*>(out), n, add, s);
  }
  void check_payload(std::span<const std::byte>, std::size_t) const override {}

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
  // A state of this composition and codec for n elements: anything else is refused before a
  // kernel could read past its memory.
  device_codec_state<C>& own(codec_state& st, std::size_t n) const {
    auto* d = dynamic_cast<device_codec_state<C>*>(&st);
    if (d == nullptr || st.codec_id != comp_.codec_id())
      raise(gc::errc::codec_mismatch, "state: made by another codec ('" + st.codec + "')");
    if (d->size() != n) raise(gc::errc::size_mismatch, "gradient size differs from the state's");
    return *d;
  }

  template <class T>
  void run_compress(const T* grad, std::size_t n, const gcu::device_state& st, std::span<std::byte> out, device_stream s) const {
    const std::size_t ws = gcu::compress_workspace_bytes<T>(comp_, n);  // a loop over the chunk plan: once
    const device_context::slot slot = ctx_->get(s, ws);
    const gcu::executor ex{stream(s), {slot.workspace, ws}};
    check(gcu::compress<T>(comp_, ex, std::span<const T>(grad, n), st, out, static_cast<gcu::report*>(slot.report)));
    ctx_->latch(s);
  }
  template <class T>
  void run_decode(std::span<const std::byte> p, T* out, std::size_t n, bool add, device_stream s) const {
    const std::size_t ws = gcu::decode_workspace_bytes<T>(comp_, n, gcu::max_frames(p.size()));
    const device_context::slot slot = ctx_->get(s, ws);
    const gcu::executor ex{stream(s), {slot.workspace, ws}};
    auto* rep = static_cast<gcu::report*>(slot.report);
    check(add ? gcu::accumulate<T>(comp_, ex, p, std::span<T>(out, n), rep)
              : gcu::decompress<T>(comp_, ex, p, std::span<T>(out, n), rep));
    ctx_->latch(s);
  }

  C comp_;
  std::shared_ptr<device_context> ctx_;
};

template <class C>
std::unique_ptr<codec_backend> make_device_codec(const C& comp, std::shared_ptr<device_context> ctx) {
  return std::make_unique<device_codec_impl<C>>(comp, std::move(ctx));
}

template <class C>
std::unique_ptr<sharded_state> make_device_sharded(const C& comp, gc::sharded::mode m, std::unique_ptr<sharded_state> host,
                                                   device_stream s) {
  return std::make_unique<device_sharded_state<C>>(comp, m, std::move(host), s);
}

// make_device_codec and make_device_sharded of every composition of slice Here of the codec
// table that has GPU kernels, as function pointers: GRADCOMP_PY_DEVICE_CODECS(slice) defines
// that list in a device*.cu file, which instantiates them all there.
template <class C>
constexpr auto device_codec_of() {
  if constexpr (device_capable<C>::value) return std::tuple{&make_device_codec<C>, &make_device_sharded<C>};
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
