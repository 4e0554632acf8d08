#pragma once
// The sharded path (gradcomp/sharded.hpp) of every registered compressor on the CPU:
// sharded_impl<C> is the sharded_codec of codec_impl<C>::make_sharded, cpu_sharded_state<C> the
// CPU's sharded_state (backend.hpp); to_device gives a state's twin on a CUDA device
// (device_impl.cuh). Python (sharded.cpp) runs the collectives.

#include <gradcomp/sharded/checkpoint.hpp>
#include <gradcomp/sharded.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec.hpp"
#include "device.hpp"

namespace gradcomp_py {

template <class C>
class sharded_impl;

// One rank's state in host memory, run by the sharded codec of the call (which must be of C).
template <class C>
class cpu_sharded_state final : public sharded_state, public host_image<gc::sharded::state> {
  using codec_type = gc::sharded::codec<C>;

 public:
  gc::sharded::state st;

  std::size_t size() const override { return st.size; }
  std::uint32_t world() const override { return st.world; }
  std::uint32_t rank() const override { return st.rank; }
  std::uint64_t step(device_stream) const override { return st.step; }
  gc::sharded::stage at() const override { return st.at; }
  gc::sharded::state& host() override { return st; }

  gc::sharded::phase describe(const sharded_codec& c, std::size_t k) const override {
    const auto p = own(c).describe(k, st);
    if (!p) raise(p.error());
    return *p;
  }
  float_block sender_residual(std::uint32_t j) override {
    if (j >= st.send.size()) raise({gc::errc::invalid_argument, "shard index outside the world"});
    return {st.send[j].residual.data(), st.send[j].residual.size()};
  }
  float_block owner_residual() override { return {st.owner.residual.data(), st.owner.residual.size()}; }

  void encode(const sharded_codec& c, std::size_t k, const void* grad, std::size_t n, std::span<std::byte> out,
              device_stream) override {
    const codec_type& x = own(c);
    if (k != codec_type::scatter_phase) check(x.template encode<float>(k, std::span<const float>(), st, out));
    else if (grad_type == gc::dtype::f32) check(x.template encode<float>(k, std::span(static_cast<const float*>(grad), n), st, out));
    else check(x.template encode<gc::bf16_t>(k, std::span(static_cast<const gc::bf16_t*>(grad), n), st, out));
  }
  void receive(const sharded_codec& c, std::size_t k, std::span<const std::byte> in, void* out, std::size_t n, gc::dtype t,
               device_stream) override {
    const codec_type& x = own(c);
    if (t == gc::dtype::f32) check(x.template receive<float>(k, st, in, std::span(static_cast<float*>(out), n)));
    else check(x.template receive<gc::bf16_t>(k, st, in, std::span(static_cast<gc::bf16_t*>(out), n)));
  }

  std::vector<std::byte> checkpoint(const sharded_codec& c, device_stream) override {
    const codec_type& x = own(c);
    std::vector<std::byte> out(gc::sharded::checkpoint_bytes(x, st));
    const auto r = gc::sharded::save_checkpoint(x, st, out);
    if (!r) raise(r.error());
    out.resize(*r);
    return out;
  }
  void load_checkpoint(const sharded_codec& c, std::span<const std::byte> in, device_stream) override {
    check(gc::sharded::load_checkpoint(own(c), in, st));
  }
  void restore_elastic(const sharded_codec& c, std::span<const std::span<const std::byte>> saved, device_stream) override {
    check(gc::sharded::restore_elastic(own(c), saved, st));
  }

 private:
  static const codec_type& own(const sharded_codec& c);
};

template <class C>
class sharded_impl final : public sharded_codec {
  using codec_type = gc::sharded::codec<C>;

 public:
  sharded_impl(const C& c, gc::sharded::mode m) : codec_(c, m), flow_(c, c, m) { check(codec_.validate()); }

  const codec_type& get() const { return codec_; }
  gc::sharded::mode get_mode() const override { return codec_.get_mode(); }
  std::size_t phase_count() const override { return codec_.phase_count(); }

  std::unique_ptr<sharded_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const override {
    auto s = std::make_unique<cpu_sharded_state<C>>();
    check(codec_.make_state(n, world, rank, s->st));
    return s;
  }
  std::unique_ptr<sharded_state> to_device(std::unique_ptr<sharded_state> host, device_stream s) const override {
#ifdef GRADCOMP_PY_CUDA
    if constexpr (device_capable<C>::value) return make_device_sharded<C>(codec_.sender(), get_mode(), std::move(host), s);
#endif
    (void)host, (void)s;
    return nullptr;
  }
  gc::sharded::phase describe(std::size_t k, std::size_t n, std::uint32_t world) const override {
    check(flow_.check_geometry(n, world, 0));  // what make_state(n, world, 0) checks
    const auto p = flow_.describe(k, n, world);
    if (!p) raise(p.error());
    return *p;
  }

 private:
  codec_type codec_;
  gc::sharded::detail::flow<C> flow_;  // what codec_ runs: its sizes without a state
};

template <class C>
const gc::sharded::codec<C>& cpu_sharded_state<C>::own(const sharded_codec& c) {
  const auto* p = dynamic_cast<const sharded_impl<C>*>(&c);
  if (p == nullptr) raise({gc::errc::codec_mismatch, "sharded state made by another codec"});
  return p->get();
}

template <class C>
std::unique_ptr<sharded_codec> codec_impl<C>::make_sharded(gc::sharded::mode m) const {
  return std::make_unique<sharded_impl<C>>(comp_, m);
}

}  // namespace gradcomp_py
