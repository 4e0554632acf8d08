#pragma once
// Single-phase summable codecs (summable/phases.hpp): the values themselves, cast to fp32,
// bf16 or fp16, either all of them (cast<Q>) or a random k per shard chosen with a seed every
// rank shares (random_k<Q>), with optional error feedback. The transport sums the buffers; a
// reduce-scatter hands rank r the sum over its shard (summable::shard_of).
//
//   cast<Q>:      count = world * shard_size(n, world); element j of the flat buffer at j,
//                 the padding past n zero.
//   random_k<Q>:  k = ceil(density * shard_size) values per shard, count = world * k; shard i
//                 sends the values at pi_i(0), ..., pi_i(k - 1) of a keyed permutation of
//                 [0, shard_size) (core/permutation.hpp, key = (seed, step), chunk = i), in
//                 that order; positions past the shard's end (the last shard) send 0.
// Error feedback (config::feedback): x = g + e; sent = decode(encode(x)); e = x - sent, and
// e = x where nothing was sent (feedback::residual with scale 1), so sent + e' == g + e.
// receive() checks the size and that the padding holds zeros (a misrouted shard) before it
// writes; unsent positions of random-k decode to 0.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "../core/permutation.hpp"
#include "../feedback/residual.hpp"
#include "../quantize/bf16.hpp"
#include "../quantize/fp16.hpp"
#include "../quantize/none.hpp"
#include "../sparsify/randomk.hpp"
#include "phases.hpp"

namespace gradcomp::summable {

// One rank's state of a single-phase codec.
struct rank_state {
  std::size_t size = 0;        // gradient elements
  std::uint32_t world = 1;     // ranks
  std::uint32_t rank = 0;      // this rank
  std::uint64_t step = 0;      // advanced by finish_step
  std::uint32_t key = 0;       // random-k: the permutation's seed (from config at make_state)
  std::vector<float> residual;  // `size` floats with feedback, else empty
};

template <class Q>
concept cast_quantizer = std::same_as<Q, quantize::none> || std::same_as<Q, quantize::bf16> || std::same_as<Q, quantize::fp16>;

namespace detail {

template <class Q>
constexpr wire_type wire_of() {
  if constexpr (std::same_as<Q, quantize::none>) {
    return wire_type::f32;
  } else if constexpr (std::same_as<Q, quantize::bf16>) {
    return wire_type::bf16;
  } else {
    return wire_type::f16;
  }
}

// What cast<Q> and random_k<Q> share: the element codes, the state checks, the feedback.
template <class Q>
struct values_base {
  static_assert(cast_quantizer<Q>,
                "gradcomp::summable: the values of a summable codec must be a cast the transport can add: "
                "quantize::none (fp32), quantize::bf16 or quantize::fp16");
  using code_type = typename Q::code_type;

  static code_type encode(float x) { return Q::encode({}, {}, x, 0); }
  static float decode(code_type c) { return Q::decode({}, {}, c); }
  static code_type load(const std::byte* p, std::size_t i) {
    code_type c;
    std::memcpy(&c, p + i * sizeof(code_type), sizeof c);
    return c;
  }
  static void store(std::byte* p, std::size_t i, code_type c) { std::memcpy(p + i * sizeof(code_type), &c, sizeof c); }

  static rank_state make(std::size_t n, std::uint32_t world, std::uint32_t rank, bool feedback, std::uint32_t key) {
    rank_state s;
    s.size = n;
    s.world = world;
    s.rank = rank;
    s.key = key;
    if (feedback) s.residual.assign(n, 0.0f);
    return s;
  }
  static status check_state(const rank_state& st, bool feedback) {
    if (st.world == 0 || st.rank >= st.world) return {errc::invalid_argument, "state needs world >= 1 and rank < world"};
    if (st.residual.size() != (feedback ? st.size : 0))
      return {errc::size_mismatch, "state residual differs from the codec's feedback setting"};
    return {};
  }
  static status check_phase(std::size_t k) {
    if (k != 0) return {errc::invalid_argument, "a single-phase codec has only phase 0"};
    return {};
  }
  // x, the value considered for sending (the state keeps e = x until it is sent).
  static float take(const rank_state& st, std::span<const float> g, std::size_t j) {
    return st.residual.empty() ? g[j] : feedback::residual::combine({}, g[j], st.residual[j]);
  }
  // Encodes x and keeps what the code does not convey.
  static code_type send(rank_state& st, std::size_t j, float x) {
    const code_type c = encode(x);
    if (!st.residual.empty()) st.residual[j] = feedback::residual::remainder({}, x, decode(c));
    return c;
  }
};

}  // namespace detail

template <class Q>
class cast : detail::values_base<Q> {
  using base = detail::values_base<Q>;

 public:
  static constexpr aggregation aggregation_kind = aggregation::summable;
  using state_type = rank_state;
  struct config {
    bool feedback = true;  // keep the cast's rounding error as a residual
  };

  cast() = default;
  explicit cast(const config& c) : cfg_(c) {}
  const config& get_config() const { return cfg_; }
  status validate() const { return {}; }
  std::size_t phase_count() const { return 1; }

  rank_state make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    return base::make(n, world, rank, cfg_.feedback, 0);
  }

  result<phase> describe(std::size_t k, const rank_state& st) const {
    if (status s = base::check_phase(k); !s) return s;
    if (status s = base::check_state(st, cfg_.feedback); !s) return s;
    return phase{"values", detail::wire_of<Q>(), reduction::sum, st.world * shard_size(st.size, st.world), st.world, true, 0};
  }

  status encode(std::size_t k, std::span<const float> grad, rank_state& st, std::span<std::byte> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    if (out.size() != p->bytes()) return {errc::size_mismatch, "phase buffer differs from describe().bytes()"};
    for (std::size_t j = 0; j < st.size; ++j) base::store(out.data(), j, base::send(st, j, base::take(st, grad, j)));
    for (std::size_t j = st.size; j < p->count; ++j) base::store(out.data(), j, 0);
    return {};
  }

  // `in`: the whole reduced buffer (out: n values) or this rank's shard (out: its shard).
  status receive(std::size_t k, rank_state& st, std::span<const std::byte> in, std::span<float> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    const result<received> got = classify(*p, in.size());
    if (!got) return got.error();
    const chunk_range r = *got == received::whole ? chunk_range{0, st.size} : shard_of(st.size, st.world, st.rank);
    if (out.size() != r.count) return {errc::size_mismatch, "output differs from the received range"};
    const std::size_t filled = *got == received::whole ? p->count : p->shard_count();
    for (std::size_t i = r.count; i < filled; ++i)
      if (base::load(in.data(), i) != 0) return {errc::index_out_of_range, "non-zero value in the padding past the buffer"};
    for (std::size_t i = 0; i < r.count; ++i) out[i] = base::decode(base::load(in.data(), i));
    return {};
  }

  void finish_step(rank_state& st) const { ++st.step; }

 private:
  config cfg_{};
};

template <class Q>
class random_k : detail::values_base<Q> {
  using base = detail::values_base<Q>;

 public:
  static constexpr aggregation aggregation_kind = aggregation::summable;
  using state_type = rank_state;
  struct config {
    double density = 0.01;  // fraction of each shard sent, in (0, 1]
    bool feedback = true;   // keep what was not sent (and the cast's rounding) as a residual
    std::uint32_t seed = 0;  // the permutation's key: the same on every rank
  };

  random_k() = default;
  explicit random_k(const config& c) : cfg_(c) {}
  const config& get_config() const { return cfg_; }
  status validate() const { return sparsify::randomk::validate({cfg_.density}); }
  std::size_t phase_count() const { return 1; }

  rank_state make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    return base::make(n, world, rank, cfg_.feedback, cfg_.seed);
  }

  // Values sent per shard.
  std::size_t per_shard(const rank_state& st) const {
    return sparsify::randomk::kept({cfg_.density}, shard_size(st.size, st.world));
  }

  result<phase> describe(std::size_t k, const rank_state& st) const {
    if (status s = validate(); !s) return s;
    if (status s = base::check_phase(k); !s) return s;
    if (status s = base::check_state(st, cfg_.feedback); !s) return s;
    if (shard_size(st.size, st.world) > 0xffffffffu) return status{errc::count_too_large, "random-k shards hold at most 2^32 elements"};
    return phase{"values", detail::wire_of<Q>(), reduction::sum, st.world * per_shard(st), st.world, true, 0};
  }

  status encode(std::size_t k, std::span<const float> grad, rank_state& st, std::span<std::byte> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    if (out.size() != p->bytes()) return {errc::size_mismatch, "phase buffer differs from describe().bytes()"};
    if (!st.residual.empty())  // e = x everywhere; the sent positions keep only the rounding
      for (std::size_t j = 0; j < st.size; ++j) st.residual[j] = base::take(st, grad, j);
    const std::size_t kk = per_shard(st);
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = shard_of(st.size, st.world, i);
      const feistel_permutation pi(shard_size(st.size, st.world), st.key, st.step, i);
      for (std::size_t m = 0; m < kk; ++m) {
        const std::uint32_t pos = pi(static_cast<std::uint32_t>(m));
        typename base::code_type c = 0;
        if (pos < r.count) {
          const std::size_t j = r.offset + pos;
          c = base::send(st, j, st.residual.empty() ? grad[j] : st.residual[j]);
        }
        base::store(out.data(), i * kk + m, c);
      }
    }
    return {};
  }

  status receive(std::size_t k, rank_state& st, std::span<const std::byte> in, std::span<float> out) const {
    const result<phase> p = describe(k, st);
    if (!p) return p.error();
    const result<received> got = classify(*p, in.size());
    if (!got) return got.error();
    const bool whole = *got == received::whole;
    if (out.size() != (whole ? st.size : shard_of(st.size, st.world, st.rank).count))
      return {errc::size_mismatch, "output differs from the received range"};
    const std::size_t kk = per_shard(st);
    const std::uint32_t first = whole ? 0 : st.rank, last = whole ? st.world : st.rank + 1;
    for (int pass = 0; pass < 2; ++pass) {  // check every padding value, then write
      if (pass == 1) std::fill(out.begin(), out.end(), 0.0f);
      for (std::uint32_t i = first; i < last; ++i) {
        const chunk_range r = shard_of(st.size, st.world, i);
        const std::size_t base_out = whole ? r.offset : 0, base_in = (i - first) * kk;
        const feistel_permutation pi(shard_size(st.size, st.world), st.key, st.step, i);
        for (std::size_t m = 0; m < kk; ++m) {
          const std::uint32_t pos = pi(static_cast<std::uint32_t>(m));
          const auto c = base::load(in.data(), base_in + m);
          if (pass == 0 && pos >= r.count && c != 0)
            return {errc::index_out_of_range, "non-zero value sent for a position past the shard"};
          if (pass == 1 && pos < r.count) out[base_out + pos] = base::decode(c);
        }
      }
    }
    return {};
  }

  void finish_step(rank_state& st) const { ++st.step; }

 private:
  config cfg_{};
};

}  // namespace gradcomp::summable
