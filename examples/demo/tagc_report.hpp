#pragma once
// The demo's TAGC section: 4 simulated data-parallel ranks reduce-scatter the demo's gradient
// buffer through the TAGC codec (docs/tagc.md) and through a plain bf16 reduce-scatter. Rank r's
// gradient is the demo's g scaled per element by 1 + 0.5 u_r (u_r uniform in [-1, 1)): the same
// large positions on every rank, as in data-parallel training. Printed per configuration: bytes
// each rank sends per step (ring collectives: an all-reduce sends 2 (W - 1) / W of its buffer, a
// reduce-scatter (W - 1) / W), their ratio to bf16, the relative error of the sum the ranks
// receive after one step and after `steps` steps (error feedback carries what was not sent),
// the fraction of the union's kept positions that peeled, and sketch cells per kept position.

#include <gradcomp/gradcomp.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace demo_tagc {

namespace gc = gradcomp;
namespace gt = gradcomp::tagc;

inline void reduce_into(const gc::summable::phase& p, std::vector<std::byte>& total, const std::vector<std::byte>& add) {
  const std::size_t e = p.element_bytes();
  for (std::size_t i = 0; i < p.count; ++i) {
    if (p.type == gc::summable::wire_type::u32) {
      std::uint32_t a, b;
      std::memcpy(&a, &total[e * i], 4);
      std::memcpy(&b, &add[e * i], 4);
      a = p.op == gc::summable::reduction::bitwise_or ? a | b : a + b;
      std::memcpy(&total[e * i], &a, 4);
    } else {  // bf16 cells (the configurations below)
      gc::bf16_t a, b;
      std::memcpy(&a, &total[e * i], 2);
      std::memcpy(&b, &add[e * i], 2);
      a = gc::bf16_t::from_float(a.to_float() + b.to_float());
      std::memcpy(&total[e * i], &a, 2);
    }
  }
}

struct outcome {
  double bytes = 0, err1 = 0, err_steps = 0, peeled = 0, cells_per_item = 0, seconds = 0;
};

// `steps` steps of the same gradients; errors of the summed outputs against k * sum_r g_r.
inline outcome run(const gt::config& cfg, const std::vector<std::vector<float>>& g, const std::vector<double>& sum,
                   double sum_norm, int steps) {
  const auto world = static_cast<std::uint32_t>(g.size());
  const std::size_t n = sum.size();
  const gt::codec c(cfg);
  std::vector<gt::state> st(world);
  for (std::uint32_t r = 0; r < world; ++r)
    if (!c.make_state(n, world, r, st[r])) return {};
  std::vector<float> out(n), delivered(n, 0.0f);
  outcome o;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    double bytes = 0;
    for (std::size_t k = 0; k < 2; ++k) {
      const auto p = c.describe(k, st[0]);
      std::vector<std::byte> total(p->bytes()), mine(p->bytes());
      for (std::uint32_t r = 0; r < world; ++r) {
        if (!c.encode(k, g[r], st[r], r == 0 ? total : mine)) return {};
        if (r > 0) reduce_into(*p, total, mine);
      }
      bytes += (k == 0 ? 2.0 : 1.0) * (world - 1) / world * static_cast<double>(p->bytes());
      for (std::uint32_t r = 0; r < world; ++r) {
        const gc::chunk_range m = gc::summable::shard_of(n, world, r);
        const auto got = k == 0 ? std::span<const std::byte>(total)
                                : std::span<const std::byte>(total).subspan(r * p->shard_bytes(), p->shard_bytes());
        if (!c.receive(k, st[r], got, k == 0 ? std::span<float>{} : std::span<float>(out).subspan(m.offset, m.count))) return {};
      }
    }
    for (auto& s : st) c.finish_step(s);
    double err = 0;
    for (std::size_t j = 0; j < n; ++j) {
      delivered[j] += out[j];
      const double d = delivered[j] - (step + 1) * sum[j];
      err += d * d;
    }
    err = std::sqrt(err) / ((step + 1) * sum_norm);
    if (step == 0) {
      o.bytes = bytes;
      o.err1 = err;
      double items = 0, peeled = 0;
      for (const auto& s : st) items += s.stats.items, peeled += s.stats.peeled;
      o.peeled = items > 0 ? peeled / items : 1.0;
      o.cells_per_item = items > 0 ? static_cast<double>(world) * st[0].rows * cfg.block / items : 0.0;
    }
    o.err_steps = err;
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  return o;
}

inline void tagc_report(std::span<const float> grad, int steps = 4) {
  constexpr std::uint32_t world = 4;
  const std::size_t n = grad.size();
  std::vector<std::vector<float>> g(world, std::vector<float>(n));
  std::vector<double> sum(n, 0.0);
  for (std::uint32_t r = 0; r < world; ++r)
    for (std::size_t j = 0; j < n; ++j) {
      const float u = static_cast<float>(gc::murmur3_u32(static_cast<std::uint32_t>(j), 31 + r) >> 8) * 0x1.0p-23f - 1.0f;
      g[r][j] = grad[j] * (1.0f + 0.5f * u);
      sum[j] += g[r][j];
    }
  double sum_norm = 0, bf16_err = 0;
  for (std::size_t j = 0; j < n; ++j) {
    sum_norm += sum[j] * sum[j];
    float acc = gc::bf16_t::from_float(g[0][j]).to_float();  // a bf16 ring: every partial sum rounded
    for (std::uint32_t r = 1; r < world; ++r) acc = gc::bf16_t::from_float(acc + gc::bf16_t::from_float(g[r][j]).to_float()).to_float();
    bf16_err += (acc - sum[j]) * (acc - sum[j]);
  }
  sum_norm = std::sqrt(sum_norm);
  const double bf16_bytes = (world - 1.0) / world * 2.0 * static_cast<double>(world * ((n + world - 1) / world));
  std::printf("\nTAGC, %u simulated ranks, reduce-scatter of the %zu-element buffer (docs/tagc.md)\n", world, n);
  std::printf("%-31s %12s %9s %12s %14s %8s %10s %8s\n", "configuration", "MB per rank", "x fewer", "error 1 step", "error steps",
              "peeled", "cells/item", "s/step");
  std::printf("%s\n", std::string(111, '-').c_str());
  std::printf("%-31s %12.2f %9.2f %12.3e %14s %8s %10s %8s\n", "bf16 reduce-scatter", bf16_bytes / 1e6, 1.0,
              std::sqrt(bf16_err) / sum_norm, "-", "-", "-", "-");
  gt::config default_nccl;
  default_nccl.bitmap = gt::bitmap_mode::sum_safe;
  const struct {
    const char* name;
    gt::config cfg;
  } rows[] = {{"TAGC-2 preset (ratio 10)", gt::preset_tagc2()}, {"default: adaptive, OR", gt::config{}},
              {"default: sum-safe (NCCL)", default_nccl}};
  for (const auto& row : rows) {
    const outcome o = run(row.cfg, g, sum, sum_norm, steps);
    char err_steps[32];
    std::snprintf(err_steps, sizeof err_steps, "%.3e (%d)", o.err_steps, steps);
    std::printf("%-31s %12.2f %9.2f %12.3e %14s %8.4f %10.2f %8.2f\n", row.name, o.bytes / 1e6, bf16_bytes / o.bytes, o.err1,
                err_steps, o.peeled, o.cells_per_item, o.seconds);
  }
  std::printf(
      "x fewer: bf16 reduce-scatter bytes / the row's. error: ||sum of decoded steps - k sum_r g_r|| / ||k sum_r g_r|| after\n"
      "  k = 1 step and k = the bracketed steps of the same gradients (error feedback keeps what is not sent; TAGC sends\n"
      "  about 1.25%% of each shard per rank per step, so one step's error is that of a sparse sum). peeled: fraction of\n"
      "  the union's positions recovered (the rest stay in the senders' residuals). s/step: all 4 ranks, one thread.\n");
}

}  // namespace demo_tagc
