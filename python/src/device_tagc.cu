// TAGC-2 states on a CUDA device for gradcomp.Tagc (device.hpp's device_tagc): gradcomp::cuda::tagc
// in the padded sketch layout, one allocation per state (state, workspace, error word).

#include <gradcomp/cuda/tagc.cuh>

#include "device_impl.cuh"

namespace gradcomp_py {

namespace {

namespace gtc = gradcomp::cuda::tagc;

// sticky = the first failing step's code, in stream order (the next encode(0) clears the report).
__global__ void latch_step_kernel(const gc::tagc::step_report* rep, std::uint32_t* sticky) {
  if (*sticky == 0 && rep->code != 0) *sticky = rep->code;
}

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
    latch_step_kernel<<<1, 1, 0, stream(s)>>>(st_.report(), sticky_);
    check_cuda(cudaGetLastError(), "latch");
  }

  void finish_step(device_stream s) override {
    device_guard on(device_);
    check(codec_.finish_step(stream(s), st_));
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
    std::uint32_t code = 0;
    check_cuda(cudaMemcpyAsync(&code, sticky_, sizeof code, cudaMemcpyDeviceToHost, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    if (code != 0) check_cuda(cudaMemsetAsync(sticky_, 0, sizeof code, stream(s)), "cudaMemsetAsync");
    return code;
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

}  // namespace

std::unique_ptr<device_tagc> make_device_tagc(const gc::tagc::config& c, std::size_t n, std::uint32_t world,
                                              std::uint32_t rank, device_stream s) {
  return std::make_unique<tagc_state>(c, n, world, rank, s);
}

}  // namespace gradcomp_py
