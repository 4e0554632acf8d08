// The AccTFM hybrid (token-level top-k + piecewise quantization) on the gather path: 2, 4
// and 8 tensor-parallel ranks simulated in one process, each compressing its partial
// [tokens x hidden] result, all payloads all-gathered and accumulated, against the dense sum.
#include <doctest/doctest.h>

#include <gradcomp/model/acctfm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "support/frames.hpp"

namespace gc = gradcomp;
namespace gm = gradcomp::model;

namespace {

constexpr std::size_t tokens = 128, hidden = 256, rows_per_chunk = 32;
constexpr double density = 1.0 / 8;
using H = gm::acctfm<4>;

// Activation-like: a log-normal scale per token, Student-t(3) values, and a few outlier
// hidden channels twenty times larger (the outlier features of transformer activations).
std::vector<float> activation(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi2(3.0f);
  std::vector<float> x(tokens * hidden);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float scale = std::exp(0.5f * normal(gen));
    for (std::size_t h = 0; h < hidden; ++h) {
      const float outlier = h % 61 == 7 ? 20.0f : 1.0f;
      x[t * hidden + h] = scale * outlier * normal(gen) / std::sqrt(chi2(gen) / 3.0f + 1e-12f);
    }
  }
  return x;
}

double norm(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

std::vector<std::byte> compress(const H& h, std::span<const float> x) {
  auto st = h.make_state(x.size());
  std::vector<std::byte> p(h.max_payload_bytes<float>(x.size()));
  const auto w = h.compress<float>(x, st, p);
  REQUIRE(w.ok());
  p.resize(*w);
  return p;
}

}  // namespace

TEST_CASE("acctfm: one rank's frames keep each token's top k, quantized within the piecewise bound") {
  const H h(gm::acctfm_config<4>(hidden, density, rows_per_chunk));
  REQUIRE(h.validate().ok());
  CHECK(h.chunk_count<float>(tokens * hidden) == tokens / rows_per_chunk);
  const auto x = activation(1);
  const auto payload = compress(h, x);
  std::vector<float> d(x.size(), 0.0f);
  REQUIRE(h.decompress<float>(payload, d).ok());
  const std::size_t k = static_cast<std::size_t>(std::ceil(density * hidden));
  for (std::size_t t = 0; t < tokens; ++t) {
    // The kept set: the row's k largest |x| (no ties in continuous data).
    std::vector<float> mags(hidden);
    for (std::size_t j = 0; j < hidden; ++j) mags[j] = std::abs(x[t * hidden + j]);
    std::vector<float> sorted = mags;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(), std::greater<>());
    const float kth = sorted[k - 1];
    std::size_t kept = 0;
    for (std::size_t j = 0; j < hidden; ++j) {
      const bool selected = mags[j] >= kth;
      if (!selected && d[t * hidden + j] != 0.0f) FAIL_CHECK("token " << t << " sends element " << j);
      kept += selected;
    }
    CHECK(kept == k);
  }
  // Piecewise<4>: |x - q(x)| <= M / 8 (+ 2^-20 M) for the group's M = max |x|, groups of
  // 128 kept values in index order within each frame.
  for (const auto frame : gc::test::split_frames(std::span<std::byte>(const_cast<std::byte*>(payload.data()), payload.size()))) {
    const auto hd = gc::test::header_of(frame);
    const auto idx = gc::test::frame_indices(frame);
    for (std::size_t g0 = 0; g0 < idx.size(); g0 += 128) {
      const std::size_t g1 = std::min(idx.size(), g0 + 128);
      float m = 0;
      for (std::size_t i = g0; i < g1; ++i) m = std::max(m, std::abs(x[hd.element_offset + idx[i]]));
      for (std::size_t i = g0; i < g1; ++i) {
        const std::size_t j = hd.element_offset + idx[i];
        CHECK(std::abs(d[j] - x[j]) <= m / 8 + m * 0x1p-20f);
      }
    }
  }
}

TEST_CASE("acctfm: 2, 4 and 8 tensor-parallel ranks, all-gather then accumulate, against the dense sum") {
  const H h(gm::acctfm_config<4>(hidden, density, rows_per_chunk));
  for (std::size_t ranks : {2, 4, 8}) {
    CAPTURE(ranks);
    std::vector<std::vector<float>> parts;
    std::vector<double> dense(tokens * hidden, 0.0);
    std::vector<std::byte> gathered;  // an all-gather with per-rank sizes: back to back
    std::vector<std::byte> slotted;   // a fixed-size all-gather: max_payload_bytes per rank
    const std::size_t slot = h.max_payload_bytes<float>(tokens * hidden);
    for (std::size_t r = 0; r < ranks; ++r) {
      parts.push_back(activation(static_cast<std::uint32_t>(100 * ranks + r)));
      for (std::size_t j = 0; j < dense.size(); ++j) dense[j] += parts.back()[j];
      const auto p = compress(h, parts.back());
      gathered.insert(gathered.end(), p.begin(), p.end());
      slotted.insert(slotted.end(), p.begin(), p.end());
      slotted.resize((r + 1) * slot, std::byte{0xab});  // what the rest of a slot holds does not matter
    }
    // Every rank runs the same accumulate over the same gathered bytes.
    std::vector<float> sum(tokens * hidden, 0.0f), other_rank(tokens * hidden, 0.0f), from_slots(tokens * hidden, 0.0f);
    REQUIRE(gm::accumulate_gathered<H, float>(h, gathered, 0, sum).ok());
    REQUIRE(gm::accumulate_gathered<H, float>(h, gathered, 0, other_rank).ok());
    REQUIRE(gm::accumulate_gathered<H, float>(h, slotted, slot, from_slots).ok());
    CHECK(sum == other_rank);
    CHECK(sum == from_slots);
    // The sum is the ranks' decoded payloads added in rank order, and within the triangle
    // bound of their errors.
    std::vector<float> expect(tokens * hidden, 0.0f);
    double error_bound = 0;
    for (std::size_t r = 0, at = 0; r < ranks; ++r) {
      std::vector<float> d(tokens * hidden, 0.0f);
      const auto p = compress(h, parts[r]);
      REQUIRE(h.decompress<float>(p, d).ok());
      CHECK(std::equal(p.begin(), p.end(), gathered.begin() + static_cast<std::ptrdiff_t>(at)));
      at += p.size();
      std::vector<float> diff(d.size());
      for (std::size_t j = 0; j < d.size(); ++j) expect[j] += d[j], diff[j] = d[j] - parts[r][j];
      error_bound += norm(diff);
    }
    CHECK(sum == expect);
    double e2 = 0, y2 = 0;
    for (std::size_t j = 0; j < dense.size(); ++j) e2 += std::pow(sum[j] - dense[j], 2), y2 += dense[j] * dense[j];
    const double rel = std::sqrt(e2 / y2);
    CHECK(std::sqrt(e2) <= error_bound * (1 + 1e-6));
    // Top 1/8 of each token keeps most of the energy of heavy-tailed rows: well below the
    // sqrt(1 - 1/8) = 0.94 that the contraction alone guarantees (0.22-0.23 here).
    CHECK(rel < 0.3);
    const double dense_bytes = 4.0 * tokens * hidden * static_cast<double>(ranks);
    CHECK(dense_bytes / static_cast<double>(gathered.size()) > 10);
    MESSAGE(ranks << " ranks: " << gathered.size() << " bytes gathered (fp32 " << dense_bytes << ", ratio "
                  << dense_bytes / static_cast<double>(gathered.size()) << "), relative error of the sum " << rel);
  }
}

TEST_CASE("acctfm: bf16 activations, and gathered payloads that are bad leave the sum untouched") {
  const H h(gm::acctfm_config<4>(hidden, density, rows_per_chunk));
  const auto x = activation(7);
  std::vector<gc::bf16_t> xb(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) xb[j] = gc::bf16_t::from_float(x[j]);
  auto st = h.make_state(xb.size());
  std::vector<std::byte> p(h.max_payload_bytes<gc::bf16_t>(xb.size()));
  const auto w = h.compress<gc::bf16_t>(xb, st, p);
  REQUIRE(w.ok());
  p.resize(*w);
  CHECK(h.chunk_count<gc::bf16_t>(xb.size()) == tokens / rows_per_chunk / 2);  // bf16 rows: twice as many a chunk
  std::vector<gc::bf16_t> sum(xb.size(), gc::bf16_t{0});
  REQUIRE(gm::accumulate_gathered<H, gc::bf16_t>(h, p, 0, sum).ok());
  double e2 = 0, x2 = 0;
  for (std::size_t j = 0; j < x.size(); ++j) e2 += std::pow(sum[j].to_float() - x[j], 2), x2 += x[j] * x[j];
  CHECK(std::sqrt(e2 / x2) < 0.8);

  // Two ranks in fixed slots; a flipped byte in the second rank's last frame.
  const std::size_t slot = h.max_payload_bytes<gc::bf16_t>(xb.size());
  std::vector<std::byte> slotted(2 * slot, std::byte{0});
  std::copy(p.begin(), p.end(), slotted.begin());
  std::copy(p.begin(), p.end(), slotted.begin() + static_cast<std::ptrdiff_t>(slot));
  slotted[slot + p.size() - 9] ^= std::byte{4};
  const auto before = sum;
  CHECK(gm::accumulate_gathered<H, gc::bf16_t>(h, slotted, slot, sum).code() == gc::errc::checksum_mismatch);
  CHECK(sum == before);
  CHECK(gm::accumulate_gathered<H, gc::bf16_t>(h, std::span<const std::byte>(slotted).first(slot + 1), slot, sum).code() ==
        gc::errc::size_mismatch);
  CHECK(sum == before);
}
