// libFuzzer target: the sharded path's receive(0) and receive(1), and its checkpoints, given
// good buffers with bytes changed by the input (pairs of a 2-byte offset and an XOR mask), or
// the input itself as a checkpoint. Never a crash; on error the output and the state are
// exactly as they were.

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/sharded/checkpoint.hpp>
#include <gradcomp/sharded.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace gradcomp;
namespace sh = gradcomp::sharded;

namespace {

using C = compressor<partition::chunks, sparsify::topk, quantize::int_block<8>, feedback::residual>;
constexpr std::size_t n = 700;
constexpr std::uint32_t world = 3;
using bytes = std::vector<std::byte>;

struct fixture {
  sh::codec<C> codec{C({.partition = {.chunk_bytes = 1024}, .sparsify = {.density = 0.2}}), sh::mode::all_reduce};
  std::vector<sh::codec<C>::state> st{world};
  bytes scattered, gathered, image;  // rank 1's all-to-all result, the all-gather's, rank 1's checkpoint

  fixture() {
    for (std::uint32_t r = 0; r < world; ++r) (void)codec.make_state(n, world, r, st[r]);
    const auto p0 = *codec.describe(0, st[0]);
    std::vector<bytes> send(world, bytes(p0.send_bytes()));
    for (std::uint32_t r = 0; r < world; ++r) {
      std::vector<float> g(n);
      for (std::size_t j = 0; j < n; ++j) g[j] = static_cast<float>((j * 37 + r * 11) % 101) - 50.0f;
      (void)codec.encode<float>(0, g, st[r], send[r]);
    }
    std::vector<bytes> got(world, bytes(p0.receive_bytes()));
    for (std::uint32_t to = 0; to < world; ++to)
      for (std::uint32_t from = 0; from < world; ++from)
        std::memcpy(got[to].data() + from * p0.slot_bytes, send[from].data() + to * p0.slot_bytes, p0.slot_bytes);
    scattered = got[1];
    for (std::uint32_t r = 0; r < world; ++r) (void)codec.receive<float>(0, st[r], got[r], std::span<float>());
    const auto p1 = *codec.describe(1, st[0]);
    gathered.resize(p1.receive_bytes());
    for (std::uint32_t r = 0; r < world; ++r) (void)codec.encode<float>(1, {}, st[r], std::span(gathered).subspan(r * p1.slot_bytes, p1.slot_bytes));
    image.resize(sh::checkpoint_bytes(codec, st[1]));
    (void)sh::save_checkpoint(codec, st[1], image);
  }
};

void mutate(bytes& b, const std::uint8_t* data, std::size_t size) {
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    const std::size_t at = (static_cast<std::size_t>(data[i]) | static_cast<std::size_t>(data[i + 1]) << 8) % b.size();
    b[at] ^= static_cast<std::byte>(data[i + 2]);
  }
}

bool same(const state& a, const state& b) {
  return a.size == b.size && a.step == b.step && a.residual == b.residual && a.momentum == b.momentum && a.thresholds == b.thresholds;
}

// Everything a checkpoint or a receive may change but the stage.
bool same(const sh::codec<C>::state& a, const sh::codec<C>::state& b) {
  if (a.size != b.size || a.world != b.world || a.rank != b.rank || a.step != b.step || !same(a.owner, b.owner) ||
      a.send.size() != b.send.size())
    return false;
  for (std::size_t i = 0; i < a.send.size(); ++i)
    if (!same(a.send[i], b.send[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fixture f;
  // One state reset from rank 1's by copy assignment, which reuses its buffers: a fresh copy
  // per execution would allocate (and fault in) the selector workspaces every time.
  static sh::codec<C>::state st;
  if (size == 0) return 0;
  const std::uint8_t what = data[0] % 4;
  ++data;
  --size;
  st = f.st[1];
  if (what == 0 || what == 1) {
    bytes in = what == 0 ? f.scattered : f.gathered;
    mutate(in, data, size);
    const sh::stage at = what == 0 ? sh::stage::receive_scatter : sh::stage::receive_gather;
    st.at = at;
    const std::size_t count = what == 0 ? summable::shard_of(n, world, 1).count : n;
    std::vector<float> out(count, 1.5f);
    const status s = f.codec.receive<float>(what, st, in, std::span<float>(out));
    if (!s.ok() && (out != std::vector<float>(count, 1.5f) || st.at != at || !same(st, f.st[1]))) std::abort();
    return 0;
  }
  bytes image = what == 2 ? f.image : bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  if (what == 2) mutate(image, data, size);
  const status s = sh::load_checkpoint(f.codec, image, st);
  if (!s.ok() && (st.at != f.st[1].at || !same(st, f.st[1]))) std::abort();
  return 0;
}
