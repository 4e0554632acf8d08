#pragma once
// The demo's local-steps section (docs/localsteps.md): W = 4 simulated replicas in one process,
// each taking inner SGD steps on its own toy objective (a quadratic whose target differs per
// replica), synchronised every `period` steps by localsteps::synchroniser: the pseudo-gradient
// (anchor - parameters) / W through int4 with error feedback on the sharded path (an all-to-all,
// then an all-gather, simulated here by copying the replicas' buffers), the outer step plain
// averaging. Printed per round: the loss of the mean objective, the bytes each replica sends
// against an fp32 ring all-reduce of the same values, and whether the replicas are bit-identical
// after the sync; then the same rounds with fp32 pseudo-gradients for comparison.

#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

namespace demo_localsteps {

namespace gc = gradcomp;
namespace ls = gradcomp::localsteps;

constexpr std::uint32_t world = 4;
constexpr std::size_t params = std::size_t{1} << 18;
constexpr std::size_t period = 5;  // H: inner steps between syncs
constexpr int rounds = 3;
constexpr float inner_lr = 0.1f;

// Replica r's target t_r: a shared heavy-tailed part plus the replica's own; its loss is
// 0.5 ||x - t_r||^2 / n, so the mean objective's optimum is the mean of the targets.
inline std::vector<std::vector<float>> targets() {
  std::vector<std::vector<float>> t(world, std::vector<float>(params));
  for (std::size_t j = 0; j < params; ++j) {
    const auto u = [&](std::uint32_t seed) {
      return static_cast<float>(gc::murmur3_u32(static_cast<std::uint32_t>(j), seed) >> 8) * 0x1.0p-23f - 1.0f;
    };
    const float shared = u(1) * std::exp(2.0f * u(2));
    for (std::uint32_t r = 0; r < world; ++r) t[r][j] = shared + 0.5f * u(10 + r);
  }
  return t;
}

// The mean objective at x: mean over replicas of 0.5 ||x - t_r||^2 / n.
inline double loss(std::span<const float> x, const std::vector<std::vector<float>>& t) {
  double sum = 0;
  for (const auto& tr : t)
    for (std::size_t j = 0; j < x.size(); ++j) sum += 0.5 * (x[j] - tr[j]) * (x[j] - tr[j]);
  return sum / static_cast<double>(world * x.size());
}

inline bool failed(const char* call, const gc::status& s) {
  std::fprintf(stderr, "gradcomp_demo: local steps: %s failed: %s (%s)\n", call, gc::to_string(s.code()), s.detail());
  return false;
}

struct round_result {
  double loss = 0, bytes = 0;
  bool identical = false;
};

// `rounds` rounds of `period` inner steps on every replica, the syncs through `path`; false
// (with a message) if a call fails.
template <class Path>
bool train(const Path& path, const std::vector<std::vector<float>>& t, std::vector<round_result>& out) {
  const ls::synchroniser<Path> sync({.period = period, .outer_lr = 1.0f, .momentum = 0.0f}, path);
  std::vector<std::vector<float>> x(world, std::vector<float>(params, 0.0f));  // every replica from 0
  std::vector<typename ls::synchroniser<Path>::state_type> st(world);
  for (std::uint32_t r = 0; r < world; ++r)
    if (const gc::status s = sync.make_state(x[r], world, r, st[r]); !s) return failed("make_state", s);
  std::vector<std::vector<std::byte>> send(world), recv(world);
  for (int round = 0; round < rounds; ++round) {
    double bytes = 0;
    for (std::size_t step = 0; step < period; ++step) {
      for (std::uint32_t r = 0; r < world; ++r) {
        for (std::size_t j = 0; j < params; ++j) x[r][j] -= inner_lr * (x[r][j] - t[r][j]);  // the gradient of f_r
        sync.advance(st[r]);
      }
      if (!sync.sends(st[0], 0)) continue;
      for (std::size_t k = 0; k < sync.phase_count(); ++k) {
        const auto e = sync.describe(0, k, st[0]);
        if (!e) return failed("describe", e.error());
        for (std::uint32_t r = 0; r < world; ++r) {  // every replica encodes its part of phase k
          send[r].resize(e->send_bytes);
          recv[r].resize(e->receive_bytes);
          const std::span<const float> local = k == 0 ? std::span<const float>(x[r]) : std::span<const float>{};
          if (const gc::status s = sync.encode(0, k, local, st[r], send[r]); !s) return failed("encode", s);
        }
        const bool to_all = e->op == ls::collective::all_to_all;  // otherwise an all-gather (the sharded path's phases)
        const std::size_t slot = to_all ? e->send_bytes / world : e->send_bytes;
        for (std::uint32_t r = 0; r < world; ++r)  // slot `from` of r's receive buffer: what `from` sent to r
          for (std::uint32_t from = 0; from < world; ++from)
            std::memcpy(recv[r].data() + from * slot, send[from].data() + (to_all ? r * slot : 0), slot);
        bytes += static_cast<double>((world - 1) * slot);  // each replica sends W - 1 slots
        for (std::uint32_t r = 0; r < world; ++r)
          if (const gc::status s = sync.receive(0, k, st[r], recv[r]); !s) return failed("receive", s);
      }
      for (std::uint32_t r = 0; r < world; ++r)
        if (sync.applies(st[r], 0))
          if (const gc::status s = sync.apply(0, st[r], x[r]); !s) return failed("apply", s);
    }
    bool identical = true;
    for (std::uint32_t r = 1; r < world; ++r) identical = identical && std::memcmp(x[r].data(), x[0].data(), params * sizeof(float)) == 0;
    out.push_back({loss(x[0], t), bytes, identical});
  }
  return true;
}

inline void report() {
  using int4_ef = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::int_block<4>, gc::feedback::residual>;
  using fp32 = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::none, gc::feedback::none>;
  const auto t = targets();
  std::vector<round_result> int4, exact;
  if (!train(gc::sharded::codec<int4_ef>(int4_ef{}, gc::sharded::mode::all_reduce), t, int4) ||
      !train(gc::sharded::codec<fp32>(fp32{}, gc::sharded::mode::all_reduce), t, exact))
    return;
  const double ring_fp32 = 2.0 * (world - 1) / world * 4.0 * static_cast<double>(params);  // a ring all-reduce of fp32
  std::vector<float> zero(params, 0.0f), best(params, 0.0f);
  for (std::size_t j = 0; j < params; ++j) {
    for (const auto& tr : t) best[j] += tr[j];
    best[j] /= world;
  }
  std::printf("\nLocal steps (docs/localsteps.md): %u replicas of %zu parameters, %zu inner SGD steps on each replica's own\n"
              "quadratic, then a sync of (anchor - params) / %u through int4 + error feedback (sharded path: all-to-all,\n"
              "all-gather), outer step plain averaging. Mean objective: %.4f at the start, %.4f at its minimum.\n",
              world, params, period, world, loss(zero, t), loss(best, t));
  std::printf("%-7s %13s %13s %14s %9s %11s\n", "round", "loss int4+EF", "loss fp32", "kB sent/rep.", "x fewer", "identical");
  for (int i = 0; i < rounds; ++i)
    std::printf("%-7d %13.4f %13.4f %14.1f %9.2f %11s\n", i + 1, int4[i].loss, exact[i].loss, int4[i].bytes / 1e3,
                ring_fp32 / int4[i].bytes, int4[i].identical && exact[i].identical ? "yes" : "NO");
  std::printf("x fewer: an fp32 ring all-reduce of the pseudo-gradient (2 (W - 1) / W x 4n bytes) / the bytes each replica\n"
              "  sends; loss fp32: the same rounds with fp32 pseudo-gradients. identical: every replica's parameters equal\n"
              "  bit for bit after the sync.\n");
}

}  // namespace demo_localsteps
