// The summable codecs with phases on the CPU (backend.hpp's summable family): TAGC-2
// (tagc::codec) and the summable casts (summable::cast<Q>), each a summable_codec whose states
// (cpu_summable_state) hold the library's state in host memory; make_state on a CUDA device
// gives the device's states (device_phases.cu).

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "codec.hpp"
#include "device.hpp"

namespace gradcomp_py {

namespace {

template <class Codec>
constexpr bool is_tagc = std::is_same_v<Codec, gc::tagc::codec>;

template <class Codec>
class summable_impl;

template <class Q>
constexpr gc::summable::wire_type wire_of(const gc::summable::cast<Q>&) {
  return gc::summable::detail::wire_of<Q>();
}

[[noreturn]] void no_checkpoints() {
  raise({gc::errc::invalid_argument, "only TAGC states have checkpoints (summable casts keep no state across steps)"});
}

// One rank's state in host memory, run by the codec of the call (which must be a Codec).
template <class Codec>
class cpu_summable_state final : public summable_state, public host_image<typename Codec::state_type> {
  using state_type = typename Codec::state_type;

 public:
  explicit cpu_summable_state(state_type s) : st(std::move(s)) {}
  state_type st;

  state_type& host() override { return st; }
  std::size_t size() const override { return st.size; }
  std::uint32_t world() const override { return st.world; }
  std::uint32_t rank() const override { return st.rank; }
  std::optional<report> known() const override {
    if constexpr (is_tagc<Codec>) return report{st.step, st.rows, st.stats.items, st.stats.peeled, st.stats.rounds};
    else return report{st.step};
  }
  gc::summable::phase describe(const summable_codec& c, std::size_t k) const override {
    const auto p = own(c).describe(k, st);
    if (!p) raise(p.error());
    return *p;
  }
  std::size_t max_phase_bytes(const summable_codec& c) const override {
    if constexpr (is_tagc<Codec>) return own(c).max_phase_bytes(st);
    else return describe(c, 0).bytes();
  }
  float_block residual() override { return {st.residual.data(), st.residual.size()}; }
  float_block thresholds() override {
    if constexpr (is_tagc<Codec>) return {st.thresholds.data(), st.thresholds.size()};
    else return {};
  }

  void encode(const summable_codec& c, std::size_t k, std::span<const float> grad, std::span<std::byte> out,
              device_stream) override {
    check(own(c).encode(k, grad, st, out));
  }
  void receive(const summable_codec& c, std::size_t k, std::span<const std::byte> in, std::span<float> out,
               device_stream) override {
    check(own(c).receive(k, st, in, out));
  }
  void finish_step(const summable_codec& c, device_stream) override { own(c).finish_step(st); }

  std::vector<std::byte> checkpoint(const summable_codec& c, device_stream) override {
    if constexpr (is_tagc<Codec>) {
      std::vector<std::byte> out(gc::tagc::checkpoint_bytes(st));
      const auto r = gc::tagc::save_checkpoint(own(c), st, out);
      if (!r) raise(r.error());
      return out;
    } else {
      (void)c;
      no_checkpoints();
    }
  }
  void load_checkpoint(const summable_codec& c, std::span<const std::byte> in, device_stream) override {
    if constexpr (is_tagc<Codec>) check(gc::tagc::load_checkpoint(own(c), in, st));
    else (void)c, (void)in, no_checkpoints();
  }
  void restore_elastic(const summable_codec& c, std::span<const std::span<const std::byte>> saved, device_stream) override {
    if constexpr (is_tagc<Codec>) check(gc::tagc::restore_elastic(own(c), saved, st));
    else (void)c, (void)saved, no_checkpoints();
  }

 private:
  static const Codec& own(const summable_codec& c);
};

template <class Codec>
class summable_impl final : public summable_codec {
 public:
  explicit summable_impl(const Codec& c) : codec_(c) {}
  const Codec& get() const { return codec_; }
  std::size_t phase_count() const override { return codec_.phase_count(); }

  std::unique_ptr<summable_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank,
                                             device_stream s) const override {
    if constexpr (is_tagc<Codec>) {
      if (s.device >= 0) return make_device_tagc(codec_.get_config(), n, world, rank, s);
      gc::tagc::state st;
      check(codec_.make_state(n, world, rank, st));
      return std::make_unique<cpu_summable_state<Codec>>(std::move(st));
    } else {
      if (world == 0 || rank >= world) raise({gc::errc::invalid_argument, "state needs world >= 1 and rank < world"});
      auto host = std::make_unique<cpu_summable_state<Codec>>(codec_.make_state(n, world, rank));
      if (s.device < 0) return host;
      return make_device_cast(wire_of(codec_), codec_.get_config().feedback, std::move(host), s);
    }
  }

 private:
  Codec codec_;
};

template <class Codec>
const Codec& cpu_summable_state<Codec>::own(const summable_codec& c) {
  const auto* p = dynamic_cast<const summable_impl<Codec>*>(&c);
  if (p == nullptr) raise({gc::errc::codec_mismatch, "state made by another codec or configuration"});
  return p->get();
}

// --- TAGC configuration from keyword options.
gc::summable::wire_type as_cells(const std::string& key, const option_value& v) {
  const std::string s = as_string(key, v);
  if (s == "bf16" || s == "bfloat16") return gc::summable::wire_type::bf16;
  if (s == "fp32" || s == "float32") return gc::summable::wire_type::f32;
  bad_option(key, "must be 'bf16' or 'fp32'");
}

gc::tagc::config tagc_config(const std::string& preset, const options& o) {
  gc::tagc::config c;
  if (preset == "tagc2") c = gc::tagc::preset_tagc2();
  else if (preset == "v1") c = gc::tagc::preset_v1();
  else if (preset != "default") bad_option("preset", "must be 'default', 'tagc2' or 'v1'");
  for (const auto& [key, v] : o) {
    auto& s = c.select;
    if (key == "density") s.density = as_double(key, v);
    else if (key == "estimate") s.estimate = as_rule(key, v);
    else if (key == "sample_fraction") s.sample_fraction = as_double(key, v);
    else if (key == "min_ratio") s.min_ratio = as_double(key, v);
    else if (key == "max_ratio") s.max_ratio = as_double(key, v);
    else if (key == "max_tries") s.max_tries = static_cast<unsigned>(as_int(key, v));
    else if (key == "block") c.block = static_cast<std::uint32_t>(as_int(key, v));
    else if (key == "sizing") {
      const std::string z = as_string(key, v);
      if (z == "ratio") c.rows = gc::tagc::sizing::ratio;
      else if (z == "adaptive") c.rows = gc::tagc::sizing::adaptive;
      else bad_option(key, "must be 'ratio' or 'adaptive'");
    } else if (key == "ratio") c.ratio = as_double(key, v);
    else if (key == "cells_per_item") c.cells_per_item = as_double(key, v);
    else if (key == "cells") c.cells = as_cells(key, v);
    else if (key == "bitmap") {
      const std::string z = as_string(key, v);
      if (z == "or") c.bitmap = gc::tagc::bitmap_mode::bitwise_or;
      else if (z == "sum_safe") c.bitmap = gc::tagc::bitmap_mode::sum_safe;
      else bad_option(key, "must be 'or' or 'sum_safe'");
    } else if (key == "max_rounds") c.max_rounds = static_cast<std::uint32_t>(as_int(key, v));
    else if (key == "seed") c.seed = static_cast<std::uint32_t>(as_int(key, v));
    else bad_option(key, "is not an option of TAGC");
  }
  check(gc::tagc::validate(c));
  return c;
}

options tagc_options(const gc::tagc::config& c) {
  options o;
  o["density"] = c.select.density;
  o["estimate"] = std::string(c.select.estimate == gc::sparsify::threshold::rule::tagc ? "tagc" : "dgc");
  o["sample_fraction"] = c.select.sample_fraction;
  o["min_ratio"] = c.select.min_ratio;
  o["max_ratio"] = c.select.max_ratio;
  o["max_tries"] = static_cast<long long>(c.select.max_tries);
  o["block"] = static_cast<long long>(c.block);
  o["sizing"] = std::string(c.rows == gc::tagc::sizing::ratio ? "ratio" : "adaptive");
  o["ratio"] = c.ratio;
  o["cells_per_item"] = c.cells_per_item;
  o["cells"] = std::string(c.cells == gc::summable::wire_type::bf16 ? "bf16" : "fp32");
  o["bitmap"] = std::string(c.bitmap == gc::tagc::bitmap_mode::bitwise_or ? "or" : "sum_safe");
  o["max_rounds"] = static_cast<long long>(c.max_rounds);
  o["seed"] = static_cast<long long>(c.seed);
  return o;
}

template <class Q>
summable_made made_cast(bool feedback, const char* wire) {
  return {std::make_unique<summable_impl<gc::summable::cast<Q>>>(gc::summable::cast<Q>({.feedback = feedback})),
          std::string("cast:") + wire + ":" + std::to_string(feedback), {}, false};
}

}  // namespace

summable_made make_tagc(const std::string& preset, const options& o) {
  const gc::tagc::codec c(tagc_config(preset, o));
  return {std::make_unique<summable_impl<gc::tagc::codec>>(c),
          "tagc:" + std::to_string(c.codec_id()) + ":" + std::to_string(gc::tagc::select_fingerprint(c.get_config())),
          tagc_options(c.get_config()), true};
}

summable_made make_cast(gc::summable::wire_type wire, bool feedback) {
  if (wire == gc::summable::wire_type::f32) return made_cast<gc::quantize::none>(feedback, "fp32");
  if (wire == gc::summable::wire_type::bf16) return made_cast<gc::quantize::bf16>(feedback, "bf16");
  return made_cast<gc::quantize::fp16>(feedback, "fp16");
}

}  // namespace gradcomp_py
