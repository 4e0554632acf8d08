// docs/tagc.md's reduce-scatter example (extracted from the document when CMake configures:
// tests/CMakeLists.txt) run by four ranks on four threads with in-process collectives; each
// rank's shard equals the sequential simulation's, byte for byte.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <thread>
#include <vector>

#include "tagc/support.hpp"
#include "tagc_example.inc"  // tagc_step(), from docs/tagc.md

using namespace gradcomp;
using namespace gradcomp::test::tagc;

namespace {

// Every rank publishes its buffer, waits for the others, reduces all of them in rank order and
// keeps what its collective hands it.
class thread_collectives {
 public:
  explicit thread_collectives(std::uint32_t world) : slots_(world), sync_(world) {}
  void run(std::uint32_t rank, const summable::phase& p, std::span<const std::byte> send, std::span<std::byte> recv, bool scatter) {
    slots_[rank].assign(send.begin(), send.end());
    sync_.arrive_and_wait();
    const test::bytes whole = test::reduce_all(p, slots_);
    const test::bytes got = test::received_by(p, whole, rank, scatter ? collective::reduce_scatter : collective::all_reduce);
    std::copy(got.begin(), got.end(), recv.begin());
    sync_.arrive_and_wait();  // the slots may be overwritten now
  }

 private:
  std::vector<test::bytes> slots_;
  std::barrier<> sync_;
};

}  // namespace

TEST_CASE("tagc docs example: a reduce-scatter step per rank on threads equals the simulation") {
  const std::size_t n = 50021;
  const std::uint32_t world = 4;
  gt::config cfg;
  cfg.bitmap = gt::bitmap_mode::sum_safe;  // as over NCCL
  const gt::codec c(cfg);
  auto threaded = make_ranks(c, n, world), simulated = make_ranks(c, n, world);
  thread_collectives comm(world);
  std::vector<std::vector<float>> shards(world);
  std::vector<status> results(world);
  for (int step = 0; step < 3; ++step) {
    const auto g = rank_grads(n, world, 60 + static_cast<std::uint64_t>(step), false);
    std::vector<std::thread> ranks;
    for (std::uint32_t r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        gt::state& st = threaded[r];
        std::vector<std::byte> send(c.max_phase_bytes(st)), recv(c.max_phase_bytes(st));
        shards[r].assign(summable::shard_of(n, world, r).count, 0.0f);
        const auto all_reduce = [&](const summable::phase& p, std::span<const std::byte> s, std::span<std::byte> d) {
          comm.run(r, p, s, d, false);
        };
        const auto reduce_scatter = [&](const summable::phase& p, std::span<const std::byte> s, std::span<std::byte> d) {
          comm.run(r, p, s, d, true);
        };
        results[r] = tagc_step(c, st, g[r], all_reduce, reduce_scatter, send, recv, shards[r]);
      });
    for (auto& t : ranks) t.join();
    for (const status& s : results) REQUIRE(s.ok());
    std::vector<std::vector<float>> outs;
    REQUIRE(test::run_ranks(c, simulated, g, collective::reduce_scatter, outs).ok());
    CHECK(shards == outs);
    for (std::uint32_t r = 0; r < world; ++r) CHECK(threaded[r].residual == simulated[r].residual);
  }
}
