#pragma once
// Deterministic test data: fixed seeds, heavy-tailed values like real gradients.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace gradcomp::test {

// Student-t(3)-like values: normal / sqrt(chi2(3)/3), times `scale`.
inline std::vector<float> heavy_tailed(std::size_t n, std::uint32_t seed, float scale = 1e-3f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi2(3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * normal(gen) / std::sqrt(chi2(gen) / 3.0f + 1e-12f);
  return v;
}

inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(gen());
  return v;
}

}  // namespace gradcomp::test
