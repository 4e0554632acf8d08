// The phase codecs' states on a CUDA device (device.hpp): TAGC-2 for gradcomp.Tagc
// (gradcomp::cuda::tagc in the padded sketch layout, one allocation per state: state, workspace,
// error word) and the summable casts for gradcomp.SummableCast (summable::cast<Q>'s element
// math, written once: quantizer codes and feedback::residual).

#include <gradcomp/cuda/tagc.cuh>

#include "device_impl.cuh"

namespace gradcomp_py {

namespace {

namespace gtc = gradcomp::cuda::tagc;

class tagc_state final : public device_tagc {
 public:
  tagc_state(const gc::tagc::config& c, std::size_t n, std::uint32_t world, std::uint32_t rank, device_stream s)
      : codec_(c, gtc::sketch_layout::padded), device_(s.device) {
    device_guard on(device_);
    const auto state = codec_.state_bytes(n, world);
    if (!state) raise(state.error());
    const auto work = codec_.workspace_bytes(n, world);
    if (!work) raise(work.error());
    state_bytes_ = round256(*state);
    work_bytes_ = round256(*work);
    mem_ = device_alloc(device_, state_bytes_ + work_bytes_ + 256);
    sticky_ = reinterpret_cast<std::uint32_t*>(mem_.get() + state_bytes_ + work_bytes_);
    check_cuda(cudaMemsetAsync(sticky_, 0, sizeof *sticky_, stream(s)), "cudaMemsetAsync");
    check(codec_.make_state({mem_.get(), *state}, n, world, rank, st_, stream(s)));
  }

  int device() const override { return device_; }
  std::size_t memory_bytes() const override { return state_bytes_ + work_bytes_ + 256; }
  gc::summable::phase describe(std::size_t k) const override {
    const auto p = codec_.describe(k, st_);
    if (!p) raise(p.error());
    return *p;
  }
  std::size_t max_phase_bytes() const override { return codec_.max_phase_bytes(st_); }
  float* residual() const override { return st_.v.residual; }
  float* thresholds() const override { return st_.v.thresholds; }

  void encode(std::size_t k, const float* grad, std::size_t n, std::byte* out, std::size_t bytes, device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (k == 0) check(codec_.encode_bitmap(ex, st_, {grad, n}, {out, bytes}));
    else if (k == 1) check(codec_.encode_sketch(ex, st_, {out, bytes}));
    else raise(gc::errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)");
  }

  void receive(std::size_t k, const std::byte* in, std::size_t bytes, float* out, std::size_t n, device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (k == 0) {
      check(codec_.receive_bitmap(ex, st_, {in, bytes}));
    } else if (k == 1) {
      const auto kind = gc::summable::classify(describe(1), bytes);
      if (!kind) raise(kind.error());
      check(codec_.receive_sketch(ex, st_, {in, bytes}, *kind, {out, n}));
    } else {
      raise(gc::errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)");
    }
  }

  // The step's report holds its first failure until the next encode(0): latched once per step.
  void finish_step(device_stream s) override {
    device_guard on(device_);
    check(codec_.finish_step(stream(s), st_));
    latch_kernel<><<<1, 1, 0, stream(s)>>>(&st_.report()->code, sticky_);
    check_cuda(cudaGetLastError(), "latch");
  }

  report read(device_stream s) const override {
    device_guard on(device_);
    const auto r = codec_.read_report(st_, stream(s));
    if (!r) raise(r.error());
    report out{r->rows, r->stats.items, r->stats.peeled, r->stats.rounds, 0};
    check_cuda(cudaMemcpyAsync(&out.step, st_.step(), sizeof out.step, cudaMemcpyDeviceToHost, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    return out;
  }

  std::uint32_t take_error(device_stream s) override {
    device_guard on(device_);
    return take_sticky(sticky_, s);
  }

  void download(gc::tagc::state& host, device_stream s) const override {
    device_guard on(device_);
    check(codec_.download_state(st_, host, stream(s)));
  }
  void upload(const gc::tagc::state& host, device_stream s) override {
    device_guard on(device_);
    check(codec_.upload_state(host, st_, stream(s)));
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  std::span<std::byte> work() const { return {mem_.get() + state_bytes_, work_bytes_}; }

  gtc::codec codec_;
  int device_;
  std::size_t state_bytes_ = 0, work_bytes_ = 0;
  std::shared_ptr<std::byte> mem_;
  std::uint32_t* sticky_ = nullptr;
  gtc::device_state st_{};
};

// --- Summable casts: x = g (+ e); code = Q(x); e = x - decode(code); zeros past n.
template <class Q>
__global__ void cast_encode_kernel(const float* g, float* e, typename Q::code_type* out, std::size_t n, std::size_t count) {
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < count; j += std::size_t{gridDim.x} * blockDim.x) {
    if (j >= n) {
      out[j] = typename Q::code_type{};
      continue;
    }
    const float x = e ? gc::feedback::residual::combine({}, g[j], e[j]) : g[j];
    const auto c = Q::encode({}, {}, x, 0);
    if (e) e[j] = gc::feedback::residual::remainder({}, x, Q::decode({}, {}, c));
    out[j] = c;
  }
}
// The padding past n must be zero (summable::cast::receive's check), else the gate holds the code.
template <class Q>
__global__ void cast_check_kernel(const typename Q::code_type* in, std::size_t n, std::size_t filled, std::uint32_t* gate) {
  bool bad = false;
  for (std::size_t j = n + blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < filled; j += std::size_t{gridDim.x} * blockDim.x)
    bad = bad || in[j] != typename Q::code_type{};
  if (bad) atomicCAS(gate, 0u, static_cast<std::uint32_t>(gc::errc::index_out_of_range));
}
template <class Q>
__global__ void cast_decode_kernel(const typename Q::code_type* in, float* out, std::size_t n, const std::uint32_t* gate) {
  if (*gate != 0) return;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < n; j += std::size_t{gridDim.x} * blockDim.x)
    out[j] = Q::decode({}, {}, in[j]);
}
template <class Q>
class cast_state final : public device_cast {
 public:
  cast_state(bool feedback, std::size_t n, device_stream s) : device_(s.device), n_(n), feedback_(feedback) {
    device_guard on(device_);
    mem_ = device_alloc(device_, 256 + (feedback ? round256(4 * n) : 0));
    check_cuda(cudaMemsetAsync(mem_.get(), 0, 256 + (feedback ? 4 * n : 0), stream(s)), "cudaMemsetAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
  }

  int device() const override { return device_; }
  std::size_t memory_bytes() const override { return 256 + (feedback_ ? round256(4 * n_) : 0); }
  float* residual() const override { return feedback_ ? reinterpret_cast<float*>(mem_.get() + 256) : nullptr; }

  void encode(const float* grad, std::size_t n, std::byte* out, std::size_t count, device_stream s) override {
    device_guard on(device_);
    cast_encode_kernel<Q><<<cast_grid(count), 256, 0, stream(s)>>>(grad, residual(), codes(out), n, count);
    check_cuda(cudaGetLastError(), "encode");
  }
  void receive(const std::byte* in, std::size_t filled, float* out, std::size_t n, device_stream s) override {
    device_guard on(device_);
    const auto* c = codes(const_cast<std::byte*>(in));
    check_cuda(cudaMemsetAsync(gate(), 0, sizeof(std::uint32_t), stream(s)), "cudaMemsetAsync");
    cast_check_kernel<Q><<<cast_grid(filled - n), 256, 0, stream(s)>>>(c, n, filled, gate());
    cast_decode_kernel<Q><<<cast_grid(n), 256, 0, stream(s)>>>(c, out, n, gate());
    latch_kernel<><<<1, 1, 0, stream(s)>>>(gate(), sticky());
    check_cuda(cudaGetLastError(), "receive");
  }
  std::uint32_t take_error(device_stream s) override {
    device_guard on(device_);
    return take_sticky(sticky(), s);
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  static typename Q::code_type* codes(std::byte* p) { return reinterpret_cast<typename Q::code_type*>(p); }
  std::uint32_t* gate() const { return reinterpret_cast<std::uint32_t*>(mem_.get()); }
  std::uint32_t* sticky() const { return reinterpret_cast<std::uint32_t*>(mem_.get() + 64); }

  int device_;
  std::size_t n_;
  bool feedback_;
  std::shared_ptr<std::byte> mem_;  // gate, error word, then the residual
};

}  // namespace

std::unique_ptr<device_cast> make_device_cast(gc::summable::wire_type wire, bool feedback, std::size_t n, device_stream s) {
  namespace q = gc::quantize;
  if (wire == gc::summable::wire_type::f32) return std::make_unique<cast_state<q::none>>(feedback, n, s);
  if (wire == gc::summable::wire_type::bf16) return std::make_unique<cast_state<q::bf16>>(feedback, n, s);
  return std::make_unique<cast_state<q::fp16>>(feedback, n, s);
}

std::unique_ptr<device_tagc> make_device_tagc(const gc::tagc::config& c, std::size_t n, std::uint32_t world,
                                              std::uint32_t rank, device_stream s) {
  return std::make_unique<tagc_state>(c, n, world, rank, s);
}

}  // namespace gradcomp_py
