// docs/localsteps.md's example (extracted from the document when CMake configures:
// tests/CMakeLists.txt) run by three ranks on three threads with in-process collectives of all
// three kinds: int4 + EF on the sharded path and fp32 casts summed, both leaving the replicas
// bit-identical after every sync.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#include "localsteps_example.inc"  // after_inner_step(), from docs/localsteps.md
#include "support/random.hpp"

using namespace gradcomp;

namespace {

// Every rank publishes its send buffer, waits for the others, and builds what its collective
// hands it.
class thread_collectives {
 public:
  explicit thread_collectives(std::uint32_t world) : sends_(world), sync_(world) {}
  void run(std::uint32_t rank, const localsteps::exchange& x, std::span<const std::byte> send, std::span<std::byte> recv) {
    sends_[rank].assign(send.begin(), send.end());
    sync_.arrive_and_wait();
    const std::size_t world = sends_.size();
    if (x.op == localsteps::collective::all_reduce) {
      std::vector<float> sum(send.size() / 4, 0.0f);
      for (const auto& s : sends_)
        for (std::size_t i = 0; i < sum.size(); ++i) {
          float v;
          std::memcpy(&v, s.data() + 4 * i, 4);
          sum[i] += v;
        }
      std::memcpy(recv.data(), sum.data(), recv.size());
    } else {
      const bool to_all = x.op == localsteps::collective::all_to_all;
      const std::size_t slot = to_all ? send.size() / world : send.size();
      for (std::size_t from = 0; from < world; ++from)
        std::memcpy(recv.data() + from * slot, sends_[from].data() + (to_all ? rank * slot : 0), slot);
    }
    sync_.arrive_and_wait();
  }

 private:
  std::vector<std::vector<std::byte>> sends_;
  std::barrier<> sync_;
};

template <class Path>
void train_on_threads(const Path& path) {
  const std::uint32_t world = 3;
  const localsteps::synchroniser<Path> sync({.period = 3, .outer_lr = 1.0f, .momentum = 0.0f}, path);
  const std::vector<float> init = test::heavy_tailed(5000, 1, 1.0f);
  std::vector<std::vector<float>> params(world, init);
  std::vector<int> ok(world, 1);
  thread_collectives net(world);
  std::vector<std::thread> ranks;
  for (std::uint32_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      typename localsteps::synchroniser<Path>::state_type st;
      ok[r] = static_cast<int>(static_cast<bool>(sync.make_state(init, world, r, st)));
      std::vector<std::byte> send, recv;
      for (std::uint32_t step = 0; step < 6; ++step) {
        const std::vector<float> g = test::heavy_tailed(init.size(), 100 * step + r, 1.0f);
        for (std::size_t j = 0; j < g.size(); ++j) params[r][j] -= 0.01f * g[j];
        const auto collective = [&](const localsteps::exchange& x, std::span<const std::byte> s, std::span<std::byte> v) {
          net.run(r, x, s, v);
        };
        if (!after_inner_step(sync, st, params[r], collective, send, recv)) ok[r] = 0;
      }
    });
  for (auto& t : ranks) t.join();
  for (std::uint32_t r = 0; r < world; ++r) {
    CHECK(ok[r] == 1);
    CHECK(params[r] == params[0]);  // step 6 synced every parameter
  }
}

}  // namespace

TEST_CASE("localsteps docs example: ranks on threads end each sync identical") {
  using int4_ef = compressor<partition::chunks, sparsify::dense, quantize::int_block<4>, feedback::residual>;
  SUBCASE("sharded int4 + EF") { train_on_threads(sharded::codec<int4_ef>(int4_ef{}, sharded::mode::all_reduce)); }
  SUBCASE("summable fp32") { train_on_threads(summable::cast<quantize::none>()); }
}
