// The summable codecs' states on a CUDA device (backend.hpp's summable_state, made by device.hpp's
// factories): TAGC-2 for gradcomp.Tagc (gradcomp::cuda::tagc in the padded sketch layout, one
// allocation per state: state, workspace, error word) and the summable casts for
// gradcomp.SummableCast (summable::cast<Q>'s element math, written once: quantizer codes and
// feedback::residual).

#include <gradcomp/cuda/tagc.cuh>

#include "device_impl.cuh"

namespace gradcomp_py {

namespace {

namespace gtc = gradcomp::cuda::tagc;

class tagc_state final : public summable_state {
 public:
  tagc_state(const gc::tagc::config& c, std::size_t n, std::uint32_t world, std::uint32_t rank, device_stream s)
      : codec_(c, gtc::sketch_layout::padded), device_(s.device), size_(n), world_(world), rank_(rank) {
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
  std::size_t device_bytes() const override { return state_bytes_ + work_bytes_ + 256; }
  std::size_t size() const override { return size_; }
  std::uint32_t world() const override { return world_; }
  std::uint32_t rank() const override { return rank_; }
  std::optional<report> known() const override { return std::nullopt; }
  report read(device_stream s) const override {
    device_guard on(device_);
    const auto r = codec_.read_report(st_, stream(s));
    if (!r) raise(r.error());
    report out{0, r->rows, r->stats.items, r->stats.peeled, r->stats.rounds};
    check_cuda(cudaMemcpyAsync(&out.step, st_.step(), sizeof out.step, cudaMemcpyDeviceToHost, stream(s)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
    return out;
  }
  gc::summable::phase describe(const summable_codec&, std::size_t k) const override {
    const auto p = codec_.describe(k, st_);
    if (!p) raise(p.error());
    return *p;
  }
  std::size_t max_phase_bytes(const summable_codec&) const override { return codec_.max_phase_bytes(st_); }
  float_block residual() override { return {st_.v.residual, size_, device_}; }
  float_block thresholds() override { return {st_.v.thresholds, world_, device_}; }

  void encode(const summable_codec&, std::size_t k, std::span<const float> grad, std::span<std::byte> out,
              device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (k == 0) check(codec_.encode_bitmap(ex, st_, grad, out));
    else if (k == 1) check(codec_.encode_sketch(ex, st_, out));
    else raise(gc::errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)");
  }

  void receive(const summable_codec& c, std::size_t k, std::span<const std::byte> in, std::span<float> out,
               device_stream s) override {
    device_guard on(device_);
    const gcu::executor ex{stream(s), work()};
    if (k == 0) {
      check(codec_.receive_bitmap(ex, st_, in));
    } else if (k == 1) {
      const auto kind = gc::summable::classify(describe(c, 1), in.size());
      if (!kind) raise(kind.error());
      check(codec_.receive_sketch(ex, st_, in, *kind, out));
    } else {
      raise(gc::errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)");
    }
  }

  // The step's report holds its first failure until the next encode(0): latched once per step.
  void finish_step(const summable_codec&, device_stream s) override {
    device_guard on(device_);
    check(codec_.finish_step(stream(s), st_));
    latch_kernel<><<<1, 1, 0, stream(s)>>>(&st_.report()->code, sticky_);
    check_cuda(cudaGetLastError(), "latch");
  }

  std::uint32_t take_error(device_stream s) override {
    device_guard on(device_);
    return take_sticky(sticky_, s);
  }

  // Through a fresh CPU state of the codec of the call: the checkpoint of a download; a restore,
  // uploaded only when it succeeds (the state is unchanged otherwise).
  std::vector<std::byte> checkpoint(const summable_codec& c, device_stream s) override {
    const std::unique_ptr<summable_state> h = c.make_state(size_, world_, rank_, {});
    download(image_of<gc::tagc::state>(*h), s);
    return h->checkpoint(c, s);
  }
  void load_checkpoint(const summable_codec& c, std::span<const std::byte> in, device_stream s) override {
    const std::unique_ptr<summable_state> h = c.make_state(size_, world_, rank_, {});
    h->load_checkpoint(c, in, s);
    upload(image_of<gc::tagc::state>(*h), s);
  }
  void restore_elastic(const summable_codec& c, std::span<const std::span<const std::byte>> saved, device_stream s) override {
    const std::unique_ptr<summable_state> h = c.make_state(size_, world_, rank_, {});
    h->restore_elastic(c, saved, s);
    upload(image_of<gc::tagc::state>(*h), s);
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  std::span<std::byte> work() const { return {mem_.get() + state_bytes_, work_bytes_}; }
  void download(gc::tagc::state& host, device_stream s) const {
    device_guard on(device_);
    check(codec_.download_state(st_, host, stream(s)));
  }
  void upload(const gc::tagc::state& host, device_stream s) {
    device_guard on(device_);
    check(codec_.upload_state(host, st_, stream(s)));
  }

  gtc::codec codec_;
  int device_;
  std::size_t size_;
  std::uint32_t world_, rank_;
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
// The cast's CPU state (`host_`) keeps the step and describes the phase; the device holds the
// residual, the padding check's gate and the error word.
template <class Q>
class cast_state final : public summable_state {
 public:
  cast_state(bool feedback, std::unique_ptr<summable_state> host, device_stream s)
      : device_(s.device), n_(host->size()), feedback_(feedback), host_(std::move(host)) {
    device_guard on(device_);
    mem_ = device_alloc(device_, 256 + (feedback ? round256(4 * n_) : 0));
    check_cuda(cudaMemsetAsync(mem_.get(), 0, 256 + (feedback ? 4 * n_ : 0), stream(s)), "cudaMemsetAsync");
    check_cuda(cudaStreamSynchronize(stream(s)), "cudaStreamSynchronize");
  }

  int device() const override { return device_; }
  std::size_t device_bytes() const override { return 256 + (feedback_ ? round256(4 * n_) : 0); }
  std::size_t size() const override { return n_; }
  std::uint32_t world() const override { return host_->world(); }
  std::uint32_t rank() const override { return host_->rank(); }
  std::optional<report> known() const override { return host_->known(); }
  gc::summable::phase describe(const summable_codec& c, std::size_t k) const override { return host_->describe(c, k); }
  std::size_t max_phase_bytes(const summable_codec& c) const override { return host_->max_phase_bytes(c); }
  float_block residual() override {
    float* e = feedback_ ? reinterpret_cast<float*>(mem_.get() + 256) : nullptr;
    return {e, e ? n_ : 0, device_};
  }
  float_block thresholds() override { return {}; }

  // summable::cast's checks of the sizes, on the host.
  void encode(const summable_codec& c, std::size_t k, std::span<const float> grad, std::span<std::byte> out,
              device_stream s) override {
    const gc::summable::phase p = describe(c, k);
    if (grad.size() != n_) raise({gc::errc::size_mismatch, "gradient differs from the state's size"});
    if (out.size() != p.bytes()) raise({gc::errc::size_mismatch, "phase buffer differs from describe().bytes()"});
    device_guard on(device_);
    cast_encode_kernel<Q><<<cast_grid(p.count), 256, 0, stream(s)>>>(grad.data(), residual().data, codes(out.data()), n_, p.count);
    check_cuda(cudaGetLastError(), "encode");
  }
  // The sizes on the host; the padding on the device.
  void receive(const summable_codec& c, std::size_t k, std::span<const std::byte> in, std::span<float> out,
               device_stream s) override {
    const gc::summable::phase p = describe(c, k);
    const auto got = gc::summable::classify(p, in.size());
    if (!got) raise(got.error());
    const bool whole = *got == gc::summable::received::whole;
    const std::size_t n = whole ? n_ : gc::summable::shard_of(n_, world(), rank()).count;
    if (out.size() != n) raise({gc::errc::size_mismatch, "output differs from the received range"});
    const std::size_t filled = whole ? p.count : p.shard_count();
    device_guard on(device_);
    const auto* x = codes(const_cast<std::byte*>(in.data()));
    check_cuda(cudaMemsetAsync(gate(), 0, sizeof(std::uint32_t), stream(s)), "cudaMemsetAsync");
    cast_check_kernel<Q><<<cast_grid(filled - n), 256, 0, stream(s)>>>(x, n, filled, gate());
    cast_decode_kernel<Q><<<cast_grid(n), 256, 0, stream(s)>>>(x, out.data(), n, gate());
    latch_kernel<><<<1, 1, 0, stream(s)>>>(gate(), sticky());
    check_cuda(cudaGetLastError(), "receive");
  }
  void finish_step(const summable_codec& c, device_stream s) override { host_->finish_step(c, s); }
  std::uint32_t take_error(device_stream s) override {
    device_guard on(device_);
    return take_sticky(sticky(), s);
  }
  // What a CPU cast says: casts keep no state across steps.
  std::vector<std::byte> checkpoint(const summable_codec& c, device_stream s) override { return host_->checkpoint(c, s); }
  void load_checkpoint(const summable_codec& c, std::span<const std::byte> in, device_stream s) override {
    host_->load_checkpoint(c, in, s);
  }
  void restore_elastic(const summable_codec& c, std::span<const std::span<const std::byte>> saved, device_stream s) override {
    host_->restore_elastic(c, saved, s);
  }

 private:
  static cudaStream_t stream(device_stream s) { return static_cast<cudaStream_t>(s.stream); }
  static typename Q::code_type* codes(std::byte* p) { return reinterpret_cast<typename Q::code_type*>(p); }
  std::uint32_t* gate() const { return reinterpret_cast<std::uint32_t*>(mem_.get()); }
  std::uint32_t* sticky() const { return reinterpret_cast<std::uint32_t*>(mem_.get() + 64); }

  int device_;
  std::size_t n_;
  bool feedback_;
  std::unique_ptr<summable_state> host_;
  std::shared_ptr<std::byte> mem_;  // gate, error word, then the residual
};

}  // namespace

std::unique_ptr<summable_state> make_device_cast(gc::summable::wire_type wire, bool feedback,
                                                 std::unique_ptr<summable_state> host, device_stream s) {
  namespace q = gc::quantize;
  if (wire == gc::summable::wire_type::f32) return std::make_unique<cast_state<q::none>>(feedback, std::move(host), s);
  if (wire == gc::summable::wire_type::bf16) return std::make_unique<cast_state<q::bf16>>(feedback, std::move(host), s);
  return std::make_unique<cast_state<q::fp16>>(feedback, std::move(host), s);
}

std::unique_ptr<summable_state> make_device_tagc(const gc::tagc::config& c, std::size_t n, std::uint32_t world,
                                                 std::uint32_t rank, device_stream s) {
  return std::make_unique<tagc_state>(c, n, world, rank, s);
}

}  // namespace gradcomp_py
