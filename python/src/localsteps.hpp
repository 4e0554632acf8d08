#pragma once
// Local steps (gradcomp/localsteps.hpp) behind one interface for the bindings: the flow of
// localsteps::synchroniser<Path> for a summable cast or for any registered compressor on the
// gather or sharded path (codec_impl<C>::make_localsteps, whose definition the registry files
// include). Python (gradcomp.localsteps) runs the collectives between the phases.

#include <gradcomp/gather.hpp>
#include <gradcomp/localsteps.hpp>
#include <gradcomp/localsteps/checkpoint.hpp>
#include <gradcomp/sharded.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec.hpp"

namespace gradcomp_py {

// One rank's state, whatever the path: per fragment the anchor, the values in flight (the mean
// once received), the outer momentum and where its sync stands.
class localsteps_state {
 public:
  virtual ~localsteps_state() = default;
  virtual std::size_t size() const = 0;
  virtual std::uint32_t world() const = 0;
  virtual std::uint32_t rank() const = 0;
  virtual std::uint64_t step() const = 0;
  virtual std::size_t fragments() const = 0;
  virtual std::vector<float>& anchor(std::size_t f) = 0;
  virtual std::vector<float>& values(std::size_t f) = 0;
  virtual std::vector<float>& momentum(std::size_t f) = 0;  // empty without outer momentum
  virtual const gc::localsteps::sync_order& order(std::size_t f) const = 0;

  std::string identity;  // the flow (codec, path, options, schedule) that made it
};

class localsteps_flow {
 public:
  virtual ~localsteps_flow() = default;
  virtual const gc::localsteps::config& get_config() const = 0;
  virtual std::size_t phase_count() const = 0;
  // A state whose anchors are zero (the caller sets them: anchor(f)).
  virtual std::unique_ptr<localsteps_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const = 0;
  virtual void advance(localsteps_state& st) const = 0;
  virtual bool sends(const localsteps_state& st, std::size_t f) const = 0;
  virtual bool applies(const localsteps_state& st, std::size_t f) const = 0;
  virtual gc::localsteps::exchange describe(std::size_t f, std::size_t k, const localsteps_state& st) const = 0;
  // local: the fragment's values (phase 0; null for later phases), `count` of type t.
  virtual void encode(std::size_t f, std::size_t k, const void* local, std::size_t count, gc::dtype t, localsteps_state& st,
                      std::span<std::byte> out) const = 0;
  virtual void receive(std::size_t f, std::size_t k, localsteps_state& st, std::span<const std::byte> in) const = 0;
  virtual void apply(std::size_t f, localsteps_state& st, void* local, std::size_t count, gc::dtype t) const = 0;
  virtual void mark_applied(std::size_t f, localsteps_state& st) const = 0;
  virtual std::vector<std::byte> checkpoint(const localsteps_state& st) const = 0;
  virtual void load_checkpoint(localsteps_state& st, std::span<const std::byte> in) const = 0;
  virtual void restore_elastic(localsteps_state& st, std::span<const std::span<const std::byte>> saved) const = 0;
};

template <class Path>
class localsteps_impl final : public localsteps_flow {
  using sync_type = gc::localsteps::synchroniser<Path>;

  struct state_impl final : localsteps_state {
    typename sync_type::state_type st;
    std::size_t size() const override { return st.size; }
    std::uint32_t world() const override { return st.world; }
    std::uint32_t rank() const override { return st.rank; }
    std::uint64_t step() const override { return st.step; }
    std::size_t fragments() const override { return st.fragments.size(); }
    std::vector<float>& anchor(std::size_t f) override { return at(f).anchor; }
    std::vector<float>& values(std::size_t f) override { return at(f).values; }
    std::vector<float>& momentum(std::size_t f) override { return at(f).momentum; }
    const gc::localsteps::sync_order& order(std::size_t f) const override { return const_cast<state_impl*>(this)->at(f); }
    auto& at(std::size_t f) {
      if (f >= st.fragments.size()) raise(gc::errc::invalid_argument, "local steps: no such fragment");
      return st.fragments[f];
    }
  };

  state_impl& own(localsteps_state& s) const {
    auto* p = dynamic_cast<state_impl*>(&s);
    if (p == nullptr || s.identity != identity_) raise(gc::errc::codec_mismatch, "local-steps state made by another flow");
    return *p;
  }
  const state_impl& own(const localsteps_state& s) const { return own(const_cast<localsteps_state&>(s)); }

 public:
  localsteps_impl(const gc::localsteps::config& c, const Path& p, std::string identity) : sync_(c, p), identity_(std::move(identity)) {
    check(sync_.validate());
  }

  const gc::localsteps::config& get_config() const override { return sync_.get_config(); }
  std::size_t phase_count() const override { return sync_.phase_count(); }

  std::unique_ptr<localsteps_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const override {
    auto s = std::make_unique<state_impl>();
    s->identity = identity_;
    check(sync_.make_state(std::vector<float>(n, 0.0f), world, rank, s->st));
    return s;
  }
  void advance(localsteps_state& st) const override { sync_.advance(own(st).st); }
  bool sends(const localsteps_state& st, std::size_t f) const override { return sync_.sends(own(st).st, f); }
  bool applies(const localsteps_state& st, std::size_t f) const override { return sync_.applies(own(st).st, f); }

  gc::localsteps::exchange describe(std::size_t f, std::size_t k, const localsteps_state& st) const override {
    const auto x = sync_.describe(f, k, own(st).st);
    if (!x) raise(x.error());
    return *x;
  }
  void encode(std::size_t f, std::size_t k, const void* local, std::size_t count, gc::dtype t, localsteps_state& st,
              std::span<std::byte> out) const override {
    auto& s = own(st).st;
    if (t == gc::dtype::f32) check(sync_.encode_fragment(f, k, std::span(static_cast<const float*>(local), count), s, out));
    else check(sync_.encode_fragment(f, k, std::span(static_cast<const gc::bf16_t*>(local), count), s, out));
  }
  void receive(std::size_t f, std::size_t k, localsteps_state& st, std::span<const std::byte> in) const override {
    check(sync_.receive(f, k, own(st).st, in));
  }
  void apply(std::size_t f, localsteps_state& st, void* local, std::size_t count, gc::dtype t) const override {
    auto& s = own(st).st;
    if (t == gc::dtype::f32) check(sync_.apply_fragment(f, s, std::span(static_cast<float*>(local), count)));
    else check(sync_.apply_fragment(f, s, std::span(static_cast<gc::bf16_t*>(local), count)));
  }
  void mark_applied(std::size_t f, localsteps_state& st) const override { check(sync_.mark_applied(f, own(st).st)); }

  std::vector<std::byte> checkpoint(const localsteps_state& st) const override {
    auto r = gc::localsteps::save_checkpoint(sync_, own(st).st);
    if (!r) raise(r.error());
    return std::move(*r);
  }
  void load_checkpoint(localsteps_state& st, std::span<const std::byte> in) const override {
    check(gc::localsteps::load_checkpoint(sync_, in, own(st).st));
  }
  void restore_elastic(localsteps_state& st, std::span<const std::span<const std::byte>> saved) const override {
    check(gc::localsteps::restore_elastic(sync_, saved, own(st).st));
  }

 private:
  sync_type sync_;
  std::string identity_;
};

template <class C>
std::unique_ptr<localsteps_flow> codec_impl<C>::make_localsteps(bool sharded, const gc::localsteps::config& c,
                                                                 const std::string& identity) const {
  if (sharded)
    return std::make_unique<localsteps_impl<gc::sharded::codec<C>>>(c, gc::sharded::codec<C>(comp_, gc::sharded::mode::all_reduce), identity);
  return std::make_unique<localsteps_impl<gc::gather::codec<C>>>(c, gc::gather::codec<C>(comp_), identity);
}

}  // namespace gradcomp_py
