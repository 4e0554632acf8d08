#pragma once
// The sharded path (gradcomp/sharded.hpp) behind one interface: `sharded_codec` runs
// sharded::codec<C> for the C of any registered compressor (codec_impl<C>::make_sharded), with
// `sharded_state` holding its per-rank state. Python (sharded.cpp) runs the collectives.

#include <gradcomp/sharded/checkpoint.hpp>
#include <gradcomp/sharded.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec.hpp"

namespace gradcomp_py {

// One rank's state of a sharded codec, whatever the compressor.
class sharded_state {
 public:
  virtual ~sharded_state() = default;
  virtual std::size_t size() const = 0;
  virtual std::uint32_t world() const = 0;
  virtual std::uint32_t rank() const = 0;
  virtual std::uint64_t step() const = 0;
  virtual gc::sharded::stage at() const = 0;
  // What this rank still owes destination shard j (sender error feedback; empty without).
  virtual std::vector<float>& sender_residual(std::uint32_t j) = 0;
  // The owner's residual of its reduced shard (all-reduce mode with feedback; else empty).
  virtual std::vector<float>& owner_residual() = 0;
  // The library's state (a device state's staging copy for checkpoints).
  virtual gc::sharded::state& host() = 0;

  gc::dtype grad_type = gc::dtype::f32;  // the gradients' element type
  std::string identity;                  // the codec (name, id, mode) that made it
};

class sharded_codec {
 public:
  virtual ~sharded_codec() = default;
  virtual gc::sharded::mode get_mode() const = 0;
  virtual std::size_t phase_count() const = 0;
  virtual std::unique_ptr<sharded_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const = 0;
  virtual gc::sharded::phase describe(std::size_t k, const sharded_state& st) const = 0;
  // The same for gradients of n elements at `world` ranks, without a state.
  virtual gc::sharded::phase describe(std::size_t k, std::size_t n, std::uint32_t world) const = 0;
  // k == 0: grad holds n values of st.grad_type. k == 1: grad unused.
  virtual void encode(std::size_t k, const void* grad, std::size_t n, sharded_state& st, std::span<std::byte> out) const = 0;
  // out: n values of type t (n == 0: none, receive(0) in all-reduce mode).
  virtual void receive(std::size_t k, sharded_state& st, std::span<const std::byte> in, void* out, std::size_t n,
                       gc::dtype t) const = 0;
  virtual std::vector<std::byte> checkpoint(const sharded_state& st) const = 0;
  virtual void load_checkpoint(sharded_state& st, std::span<const std::byte> in) const = 0;
  virtual void restore_elastic(sharded_state& st, std::span<const std::span<const std::byte>> saved) const = 0;
};

template <class C>
class sharded_impl final : public sharded_codec {
  using codec_type = gc::sharded::codec<C>;

  struct state_impl final : sharded_state {
    typename codec_type::state st;
    std::size_t size() const override { return st.size; }
    std::uint32_t world() const override { return st.world; }
    std::uint32_t rank() const override { return st.rank; }
    std::uint64_t step() const override { return st.step; }
    gc::sharded::stage at() const override { return st.at; }
    std::vector<float>& sender_residual(std::uint32_t j) override {
      if (j >= st.send.size()) raise({gc::errc::invalid_argument, "shard index outside the world"});
      return st.send[j].residual;
    }
    std::vector<float>& owner_residual() override { return st.owner.residual; }
    gc::sharded::state& host() override { return st; }
  };

  static state_impl& own(sharded_state& s) {
    auto* p = dynamic_cast<state_impl*>(&s);
    if (p == nullptr) raise({gc::errc::codec_mismatch, "sharded state made by another codec"});
    return *p;
  }
  static const state_impl& own(const sharded_state& s) { return own(const_cast<sharded_state&>(s)); }

 public:
  sharded_impl(const C& c, gc::sharded::mode m) : codec_(c, m), flow_(c, c, m) { check(codec_.validate()); }

  gc::sharded::mode get_mode() const override { return codec_.get_mode(); }
  std::size_t phase_count() const override { return codec_.phase_count(); }

  std::unique_ptr<sharded_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const override {
    auto s = std::make_unique<state_impl>();
    check(codec_.make_state(n, world, rank, s->st));
    return s;
  }

  gc::sharded::phase describe(std::size_t k, const sharded_state& st) const override {
    const state_impl& s = own(st);
    const auto p = codec_.describe(k, s.st);
    if (!p) raise(p.error());
    return *p;
  }
  gc::sharded::phase describe(std::size_t k, std::size_t n, std::uint32_t world) const override {
    check(flow_.check_geometry(n, world, 0));  // what make_state(n, world, 0) checks
    const auto p = flow_.describe(k, n, world);
    if (!p) raise(p.error());
    return *p;
  }

  void encode(std::size_t k, const void* grad, std::size_t n, sharded_state& st, std::span<std::byte> out) const override {
    state_impl& s = own(st);
    if (k != codec_type::scatter_phase) {
      check(codec_.template encode<float>(k, std::span<const float>(), s.st, out));
    } else if (st.grad_type == gc::dtype::f32) {
      check(codec_.template encode<float>(k, std::span(static_cast<const float*>(grad), n), s.st, out));
    } else {
      check(codec_.template encode<gc::bf16_t>(k, std::span(static_cast<const gc::bf16_t*>(grad), n), s.st, out));
    }
  }

  void receive(std::size_t k, sharded_state& st, std::span<const std::byte> in, void* out, std::size_t n,
               gc::dtype t) const override {
    receive_as(k, own(st), in, out, n, t);
  }

  std::vector<std::byte> checkpoint(const sharded_state& st) const override {
    const state_impl& s = own(st);
    std::vector<std::byte> out(gc::sharded::checkpoint_bytes(codec_, s.st));
    const auto r = gc::sharded::save_checkpoint(codec_, s.st, out);
    if (!r) raise(r.error());
    out.resize(*r);
    return out;
  }
  void load_checkpoint(sharded_state& st, std::span<const std::byte> in) const override {
    check(gc::sharded::load_checkpoint(codec_, in, own(st).st));
  }
  void restore_elastic(sharded_state& st, std::span<const std::span<const std::byte>> saved) const override {
    check(gc::sharded::restore_elastic(codec_, saved, own(st).st));
  }

 private:
  void receive_as(std::size_t k, state_impl& s, std::span<const std::byte> in, void* out, std::size_t n, gc::dtype t) const {
    if (t == gc::dtype::f32) {
      check(codec_.template receive<float>(k, s.st, in, std::span(static_cast<float*>(out), n)));
    } else {
      check(codec_.template receive<gc::bf16_t>(k, s.st, in, std::span(static_cast<gc::bf16_t*>(out), n)));
    }
  }

  codec_type codec_;
  gc::sharded::detail::flow<C> flow_;  // what codec_ runs: its sizes without a state
};

template <class C>
std::unique_ptr<sharded_codec> codec_impl<C>::make_sharded(gc::sharded::mode m) const {
  return std::make_unique<sharded_impl<C>>(comp_, m);
}

}  // namespace gradcomp_py
