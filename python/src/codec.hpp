#pragma once
// A type-erased gradcomp compressor for the Python bindings: one `codec` interface, one
// template `codec_impl<C>` per policy composition, built by name from a registry (the codec
// table, codecs.hpp, compiled in registry_*.cpp) with options from a Python dict. A codec is
// the CPU's codec_backend (backend.hpp) over CPU states (cpu_codec_state); make_device gives
// its GPU kernels (device.hpp), make_sharded its sharded path (sharded.hpp), make_localsteps
// local steps over it (localsteps.hpp; the registry files include the three definitions).

#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/options.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/localsteps/config.hpp>
#include <gradcomp/sharded.hpp>
#include <gradcomp/model/acctfm.hpp>
#include <gradcomp/model/planner.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "backend.hpp"

namespace gradcomp_py {

// Option values as the registry sees them (converted from Python by the bindings).
using option_value = std::variant<bool, long long, double, std::string>;
using options = std::map<std::string, option_value>;

class localsteps_flow;  // localsteps.hpp
class device_context;   // device.hpp

// A Compressor's state on the CPU; also a device state's host copy (its checkpoints).
class cpu_codec_state final : public codec_state {
 public:
  cpu_codec_state(gc::state s, std::uint32_t id, std::string name) : codec_state(id, std::move(name)), st(std::move(s)) {}
  gc::state st;

  std::size_t size() const override { return st.size; }
  std::uint64_t step(device_stream) override { return st.step; }
  void set_step(std::uint64_t v, device_stream) override { st.step = v; }
  float_block residual() override { return {st.residual.data(), st.residual.size()}; }
  float_block thresholds() override { return {st.thresholds.data(), st.thresholds.size()}; }
  std::vector<std::byte> checkpoint(device_stream) override {
    std::vector<std::byte> out(gc::checkpoint_bytes(st));
    const auto r = gc::save_checkpoint(st, codec_id, out);
    if (!r) raise(r.error());
    return out;
  }
  void load_checkpoint(std::span<const std::byte> in, device_stream) override { st = loaded(in); }
  // A copy of the state with `in` loaded; raises (the state unchanged) unless the bytes load.
  gc::state loaded(std::span<const std::byte> in) const {
    gc::state copy = st;
    check(gc::load_checkpoint(in, codec_id, copy));
    return copy;
  }
};

class codec : public codec_backend {
 public:
  virtual std::uint32_t codec_id() const = 0;
  virtual bool summable() const = 0;  // a plain summable cast: all-reduce its codes
  virtual unsigned wire_bits() const = 0;
  virtual bool error_feedback() const = 0;
  virtual options effective_options() const = 0;
  virtual std::size_t max_payload_bytes(std::size_t n, gc::dtype t) const = 0;
  // The library's state for n elements (a cpu_codec_state's).
  virtual gc::state host_state(std::size_t n) const = 0;
  // out += every payload of an all-gather (gc::model::accumulate_gathered): back to back
  // (slot_bytes 0) or one per slot of slot_bytes; all frames are checked before any is added.
  virtual void accumulate_gathered(std::span<const std::byte> gathered, std::size_t slot_bytes, void* out, std::size_t n,
                                   gc::dtype t) const = 0;
  // The codec's wire_path measured on a float32 sample (gc::model::measure_path).
  virtual gc::model::wire_path measure_path(std::span<const float> sample, gc::model::collective coll,
                                                  int repeats) const = 0;
  // This compressor as sharded::codec<C> in mode m (defined in sharded.hpp).
  virtual std::unique_ptr<sharded_codec> make_sharded(gc::sharded::mode m) const = 0;
  // Local steps over this compressor on the sharded path (all-reduce) or the gather path
  // (defined in localsteps.hpp).
  virtual std::unique_ptr<localsteps_flow> make_localsteps(bool sharded, const gc::localsteps::config& c,
                                                           const std::string& identity) const = 0;
  // Its GPU kernels (reporting into ctx), or null where the composition has none or the build
  // has no CUDA (device.hpp).
  virtual std::unique_ptr<codec_backend> make_device(std::shared_ptr<device_context> ctx) const = 0;
};

// --- Options: every member a policy config names (its options(), core/options.hpp) and the
// composition's own, each settable by that name.

[[noreturn]] void bad_option(const std::string& key, const char* why);
double as_double(const std::string& key, const option_value& v);
long long as_int(const std::string& key, const option_value& v);
bool as_bool(const std::string& key, const option_value& v);
std::string as_string(const std::string& key, const option_value& v);
gc::quantize::rounding as_rounding(const std::string& key, const option_value& v);
gc::sparsify::threshold::rule as_rule(const std::string& key, const option_value& v);

// An option's value as its member's type, and back.
template <class T>
T from_option(const std::string& key, const option_value& v) {
  if constexpr (std::is_same_v<T, bool>) return as_bool(key, v);
  else if constexpr (std::is_same_v<T, gc::quantize::rounding>) return as_rounding(key, v);
  else if constexpr (std::is_same_v<T, gc::sparsify::threshold::rule>) return as_rule(key, v);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(as_double(key, v));
  else return static_cast<T>(as_int(key, v));
}
template <class T>
option_value to_option(T v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_same_v<T, gc::quantize::rounding>)
    return std::string(v == gc::quantize::rounding::stochastic ? "stochastic" : "nearest");
  else if constexpr (std::is_same_v<T, gc::sparsify::threshold::rule>)
    return std::string(v == gc::sparsify::threshold::rule::tagc ? "tagc" : "dgc");
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<long long>(v);
}

// f(name, member) for every option of a composition's config: its policies' and its own.
template <class Cfg, class F>
void each_option(Cfg& c, F&& f) {
  using K = std::remove_const_t<Cfg>;
  gc::for_each_option(c.partition, f);
  gc::for_each_option(c.sparsify, f);
  gc::for_each_option(c.quantize, f);
  gc::for_each_option(c.feedback, f);
  gc::for_each_option(c.transform, f);
  gc::for_each_option(c, std::tuple{gc::option{"seed", &K::seed}, gc::option{"allow_non_finite", &K::allow_non_finite},
                                    gc::option{"compact_indices", &K::compact_indices}}, f);
}

// Sets `key` in whichever of the config's parts has an option of that name; false if none has.
template <class Cfg>
bool set_option(Cfg& c, const std::string& key, const option_value& v) {
  bool done = false;
  each_option(c, [&](const char* name, auto& member) {
    if (key == name) member = from_option<std::remove_cvref_t<decltype(member)>>(key, v), done = true;
  });
  return done;
}

template <class Cfg>
options get_options(const Cfg& c) {
  options o;
  each_option(c, [&](const char* name, const auto& member) { o[name] = to_option(member); });
  return o;
}

template <class C>
class codec_impl final : public codec {
  using Q = typename C::quantizer;
  static constexpr bool cast = C::sparsifier::is_dense && std::is_base_of_v<gc::ungrouped_quantizer, Q> &&
                               Q::summable && Q::meta_bytes == 0;

 public:
  explicit codec_impl(const typename C::config& cfg) : comp_(cfg) { check(comp_.validate()); }

  std::uint32_t codec_id() const override { return comp_.codec_id(); }
  bool summable() const override { return cast; }
  unsigned wire_bits() const override { return Q::bits; }
  bool error_feedback() const override { return C::feedback::has_state; }
  options effective_options() const override { return get_options(comp_.get_config()); }

  std::size_t max_payload_bytes(std::size_t n, gc::dtype t) const override {
    return t == gc::dtype::f32 ? comp_.template max_payload_bytes<float>(n) : comp_.template max_payload_bytes<gc::bf16_t>(n);
  }
  gc::state host_state(std::size_t n) const override { return comp_.make_state(n); }

  std::unique_ptr<codec_state> make_state(std::unique_ptr<cpu_codec_state> host, device_stream) const override {
    return host;
  }
  void check_state(codec_state& st, std::size_t) const override { (void)own(st); }

  std::size_t compress(const void* grad, std::size_t n, gc::dtype t, codec_state& st, std::span<std::byte> out,
                       device_stream) const override {
    gc::state& s = own(st).st;
    const auto r = t == gc::dtype::f32
                       ? comp_.template compress<float>(std::span(static_cast<const float*>(grad), n), s, out)
                       : comp_.template compress<gc::bf16_t>(std::span(static_cast<const gc::bf16_t*>(grad), n), s, out);
    if (!r) raise(r.error());
    return *r;
  }
  void decode(std::span<const std::byte> payload, void* out, std::size_t n, gc::dtype t, bool add,
              device_stream) const override {
    if (t == gc::dtype::f32) {
      const std::span o(static_cast<float*>(out), n);
      check(add ? comp_.template accumulate<float>(payload, o) : comp_.template decompress<float>(payload, o));
    } else {
      const std::span o(static_cast<gc::bf16_t*>(out), n);
      check(add ? comp_.template accumulate<gc::bf16_t>(payload, o) : comp_.template decompress<gc::bf16_t>(payload, o));
    }
  }

  void check_payload(std::span<const std::byte> payload, std::size_t n) const override { check(comp_.check(payload, n)); }

  void encode_cast(const float* src, void* codes, std::size_t n, float scale, device_stream) const override {
    if constexpr (cast) {
      auto* c = static_cast<typename Q::code_type*>(codes);
      const typename Q::config qc{};
      const typename Q::meta m{};
      // canonical_nan: a NaN made by the product has the same bits on every backend (docs/cuda.md).
      for (std::size_t i = 0; i < n; ++i) c[i] = Q::encode(qc, m, gc::canonical_nan(src[i] * scale), 0);
    } else {
      (void)src, (void)codes, (void)n, (void)scale;
      raise({gc::errc::invalid_argument, "encode_cast: this codec is not a summable cast"});
    }
  }
  void decode_cast(const void* codes, float* dst, std::size_t n, bool add, device_stream) const override {
    if constexpr (cast) {
      const auto* c = static_cast<const typename Q::code_type*>(codes);
      const typename Q::config qc{};
      const typename Q::meta m{};
      if (add) {
        for (std::size_t i = 0; i < n; ++i) dst[i] = gc::canonical_nan(dst[i] + Q::decode(qc, m, c[i]));
      } else {
        for (std::size_t i = 0; i < n; ++i) dst[i] = Q::decode(qc, m, c[i]);
      }
    } else {
      (void)codes, (void)dst, (void)n, (void)add;
      raise({gc::errc::invalid_argument, "decode_cast: this codec is not a summable cast"});
    }
  }
  void accumulate_gathered(std::span<const std::byte> gathered, std::size_t slot_bytes, void* out, std::size_t n,
                           gc::dtype t) const override {
    if (t == gc::dtype::f32)
      check(gc::model::accumulate_gathered<C, float>(comp_, gathered, slot_bytes, std::span(static_cast<float*>(out), n)));
    else
      check(gc::model::accumulate_gathered<C, gc::bf16_t>(comp_, gathered, slot_bytes,
                                                                std::span(static_cast<gc::bf16_t*>(out), n)));
  }
  gc::model::wire_path measure_path(std::span<const float> sample, gc::model::collective coll,
                                          int repeats) const override {
    const auto w = gc::model::measure_path(comp_, sample, coll, repeats);
    if (!w) raise(w.error());
    return *w;
  }
  std::unique_ptr<sharded_codec> make_sharded(gc::sharded::mode m) const override;
  std::unique_ptr<localsteps_flow> make_localsteps(bool sharded, const gc::localsteps::config& c,
                                                   const std::string& identity) const override;
  std::unique_ptr<codec_backend> make_device(std::shared_ptr<device_context> ctx) const override;

 private:
  // The binding checks a state's device before its call: a CPU call gets a CPU state.
  static cpu_codec_state& own(codec_state& st) {
    auto* p = dynamic_cast<cpu_codec_state*>(&st);
    if (p == nullptr) raise(gc::errc::codec_mismatch, "state: made for a CUDA device");
    return *p;
  }

  C comp_;
};

// Builds codec_impl<compressor<chunks, S, Q, F, X>> from options; F is residual feedback when
// error_feedback is set, none otherwise.
template <class S, class Q, class F, class X = gc::transform::identity>
std::unique_ptr<codec> build(const options& opts) {
  using C = gc::compressor<gc::partition::chunks, S, Q, F, X>;
  typename C::config cfg{};
  for (const auto& [key, value] : opts) {
    if (key == "error_feedback") continue;
    if (!set_option(cfg, key, value)) bad_option(key, "is not an option of this codec");
  }
  return std::make_unique<codec_impl<C>>(cfg);
}

template <class S, class Q, class X = gc::transform::identity>
std::unique_ptr<codec> build_with_feedback(const options& opts, bool default_feedback) {
  const auto it = opts.find("error_feedback");
  const bool ef = it == opts.end() ? default_feedback : as_bool("error_feedback", it->second);
  return ef ? build<S, Q, gc::feedback::residual, X>(opts) : build<S, Q, gc::feedback::none, X>(opts);
}

// The DDP hook's all-gather block (gradcomp.ddp): [int32 payload size of each frame | the
// frames, max_payload_bytes each | the sharded path's re-encoded shards, one slot each | raw
// fp32 of the small parameters], every part at a multiple of 8. The block's size is a multiple
// of 8 too on a CUDA device (device payloads start on 8 bytes) and when it holds slots.
struct gather_block {
  std::vector<std::size_t> offsets, caps;  // frame j: where, and its room (max_payload_bytes)
  std::vector<std::size_t> slot_offsets;   // slot i
  std::size_t small_offset = 0;            // the raw fp32 values
  std::size_t bytes = 0;                   // the whole block (one rank's)
};
// Frames of sizes[j] elements of types[j], slots of slot_bytes[i] bytes, small_count fp32 values.
gather_block gather_layout(const codec& c, std::span<const std::size_t> sizes, std::span<const gc::dtype> types,
                           std::span<const std::size_t> slot_bytes, std::size_t small_count, bool cuda);
// bytes from offset `at` lie within a block of `block` bytes.
constexpr bool within(std::size_t at, std::size_t bytes, std::size_t block) { return at <= block && bytes <= block - at; }

using factory = std::function<std::unique_ptr<codec>(const options&)>;
struct entry {
  std::string name, description;
  factory make;
};
// The codec table's slices (codecs.hpp), one registry_<slice>.cpp each: add_codecs<slice>
// appends that slice's codecs.
enum class codec_slice { dense, grouped, sparse };
template <codec_slice Here>
void add_codecs(std::vector<entry>& out);
// AccTFM's options: error_feedback refused, cols required, chunk_bytes 256 rows by default.
options acctfm_options(const options& opts);
std::unique_ptr<codec> make_codec(const std::string& name, const options& opts);
const std::vector<entry>& registry();

// A PhaseCodec's codec (summable_codecs.cpp), its identity (states and checkpoints carry it),
// its options (TAGC's; none for casts) and whether its states have checkpoints (casts keep no
// state across steps).
struct summable_made {
  std::unique_ptr<summable_codec> codec;
  std::string identity;
  options config;
  bool checkpoints = false;
};
// TAGC-2 from a preset ("default", "tagc2", "v1") and options; a summable cast of a wire type.
summable_made make_tagc(const std::string& preset, const options& o);
summable_made make_cast(gc::summable::wire_type wire, bool feedback);

}  // namespace gradcomp_py
