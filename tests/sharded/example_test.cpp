// docs/sharded.md's all-reduce example (extracted from the document when CMake configures:
// tests/CMakeLists.txt) run by four ranks on four threads with in-process all-to-all and
// all-gather; every rank's output equals the lossless sum's bounds and the others', bit for bit.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "sharded_example.inc"  // all_reduce_step(), from docs/sharded.md

using namespace gradcomp;

namespace {

// Every rank publishes its send buffer, waits for the others and copies what its collective
// hands it.
class thread_collectives {
 public:
  explicit thread_collectives(std::uint32_t world) : sends_(world), sync_(world) {}
  void run(std::uint32_t rank, std::span<const std::byte> send, std::span<std::byte> recv, std::size_t slot, bool to_all) {
    sends_[rank].assign(send.begin(), send.end());
    sync_.arrive_and_wait();
    for (std::size_t from = 0; from < sends_.size(); ++from)
      std::memcpy(recv.data() + from * slot, sends_[from].data() + (to_all ? rank * slot : 0), slot);
    sync_.arrive_and_wait();
  }

 private:
  std::vector<std::vector<std::byte>> sends_;
  std::barrier<> sync_;
};

}  // namespace

TEST_CASE("sharded docs example: an all-reduce step per rank on threads") {
  const std::size_t n = 40009;
  const std::uint32_t world = 4;
  const sharded::codec<int8_codec> codec(int8_codec{}, sharded::mode::all_reduce);
  std::vector<sharded::codec<int8_codec>::state> st(world);
  for (std::uint32_t r = 0; r < world; ++r) REQUIRE(codec.make_state(n, world, r, st[r]).ok());
  thread_collectives comm(world);
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> g(world, std::vector<float>(n)), out(world, std::vector<float>(n));
    std::vector<float> sum(n, 0.0f);
    for (std::uint32_t r = 0; r < world; ++r)
      for (std::size_t j = 0; j < n; ++j) {
        g[r][j] = std::sin(static_cast<float>(j * (r + 1) + static_cast<std::size_t>(step)));
        sum[j] += g[r][j];
      }
    std::vector<status> results(world);
    std::vector<std::thread> ranks;
    for (std::uint32_t r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        const std::size_t bytes = std::max(codec.describe(0, st[r])->receive_bytes(), codec.describe(1, st[r])->receive_bytes());
        std::vector<std::byte> send(bytes), recv(bytes);
        const auto all_to_all = [&](std::span<const std::byte> s, std::span<std::byte> d, std::size_t slot) { comm.run(r, s, d, slot, true); };
        const auto all_gather = [&](std::span<const std::byte> s, std::span<std::byte> d, std::size_t slot) { comm.run(r, s, d, slot, false); };
        results[r] = all_reduce_step(codec, st[r], g[r], out[r], all_to_all, all_gather, send, recv);
      });
    for (auto& t : ranks) t.join();
    for (const status& s : results) REQUIRE(s.ok());
    double err = 0, norm = 0;
    for (std::size_t j = 0; j < n; ++j) {
      err += (out[0][j] - sum[j]) * (out[0][j] - sum[j]);
      norm += sum[j] * sum[j];
    }
    CHECK(std::sqrt(err / norm) < 0.05);
    for (std::uint32_t r = 1; r < world; ++r) CHECK(std::memcmp(out[r].data(), out[0].data(), 4 * n) == 0);
  }
}
