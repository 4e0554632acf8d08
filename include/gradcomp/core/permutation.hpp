#pragma once
// A keyed pseudo-random permutation of [0, n), n <= 2^32, evaluated at any point in O(1)
// expected time and no memory: the random-k sparsifier sends the values at pi(0), ...,
// pi(k - 1), which are distinct by construction, and every rank with the same (seed, step,
// chunk) computes the same pi without exchanging indices.
//
// Construction: a balanced Feistel network on 2h bits (the smallest even width with
// 2^(2h) >= n), 6 rounds, round function MurmurHash3's finaliser of (half XOR round key),
// round keys from Philox (key = seed, step; counter = chunk, stream permutation). A Feistel
// network is a bijection of [0, 2^(2h)) whatever its round function; cycle walking (apply
// again while the result is >= n) restricts it to a bijection of [0, n), at fewer than 4
// applications per point on average since 2^(2h) < 4n. With 6 rounds of a good mixer the
// permutation is indistinguishable from a uniform one for this purpose (Luby-Rackoff needs
// 4 with a random function); tests check per-index uniformity over seeds by chi-square.

#include <cstdint>

#include "config.hpp"
#include "murmur3.hpp"
#include "philox.hpp"

namespace gradcomp {

class feistel_permutation {
 public:
  static constexpr int rounds = 6;

  GRADCOMP_HD feistel_permutation(std::uint64_t n, std::uint32_t seed, std::uint64_t step, std::uint32_t chunk) : n_(n) {
    unsigned bits = 0;
    while (bits < 64 && (std::uint64_t{1} << bits) < n) ++bits;
    half_ = bits < 2 ? 1 : (bits + 1) / 2;
    mask_ = (std::uint32_t{1} << half_) - 1u;  // half_ <= 16
    for (std::uint32_t q = 0; q < 2; ++q) {
      const philox_u32x4 r = philox4x32_10({{q, 0, chunk, static_cast<std::uint32_t>(random_stream::permutation)}}, seed,
                                           static_cast<std::uint32_t>(step));
      for (int w = 0; w < 4 && 4 * q + w < rounds; ++w) key_[4 * q + w] = r.v[w];
    }
  }

  // pi(i) for i < n.
  GRADCOMP_HD std::uint32_t operator()(std::uint32_t i) const {
    std::uint32_t x = apply(i);
    while (x >= n_) x = apply(x);
    return x;
  }

 private:
  GRADCOMP_HD std::uint32_t apply(std::uint32_t x) const {
    std::uint32_t left = x >> half_, right = x & mask_;
    for (int r = 0; r < rounds; ++r) {
      const std::uint32_t next = left ^ (detail::murmur3_finalize(right ^ key_[r], 0) & mask_);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }

  std::uint64_t n_;
  unsigned half_;
  std::uint32_t mask_;
  std::uint32_t key_[rounds] = {};
};

}  // namespace gradcomp
