// libFuzzer target: untrusted bytes through the model layer's decoders (router, AccTFM). Whatever the
// bytes, router decoding (whole payloads, one tensor's frames) and the AccTFM gathered
// accumulate must return (no crash, hang, or out-of-bounds access under ASan/UBSan) and, on
// error, leave the output exactly as it was.
//
// Input: byte 0 the options (bits 0-1: 0 router decompress + accumulate, 1 router
// accumulate_tensor, 2 AccTFM back to back, 3 AccTFM in fixed slots; bit 2: re-seal CRCs
// first so mutations reach the checks behind the checksum), byte 1 a tensor index or slot
// size (x 64 bytes), the rest the payload.

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/model.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reseal.hpp"

using namespace gradcomp;
namespace gm = gradcomp::model;

namespace {

// A GPT-2 shaped layout of one layer, d_model 16, vocab 32, context 8; frames of 64 floats.
const gm::tagc_router<>& router() {
  static const gm::tagc_router<> r = [] {
    gm::sketch_stand_in::config sk;
    sk.partition.chunk_bytes = 256;
    sk.sparsify.density = 0.25;
    gm::bf16_cast::config b;
    b.partition.chunk_bytes = 256;
    return gm::tagc_router<>(gm::gpt2_layout({1, 16, 32, 8, true}), gm::tagc_routing(false, 64),
                             {gm::sketch_stand_in(sk), gm::bf16_cast(b), gm::fp32_plain()});
  }();
  return r;
}

const gm::acctfm<4>& hybrid() {
  static const gm::acctfm<4> h(gm::acctfm_config<4>(16, 0.25, 4, 0, 8));
  return h;
}

void check(bool ok, const std::vector<float>& out, const std::vector<float>& before) {
  if (!ok && std::memcmp(out.data(), before.data(), out.size() * sizeof(float)) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t options = data[0], arg = data[1];
  std::vector<std::byte> payload(size - 2);
  if (!payload.empty()) std::memcpy(payload.data(), data + 2, payload.size());
  if (options & 4) reseal(payload);
  const auto& r = router();
  std::vector<float> out(r.get_layout().extent() + 3);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i % 5) - 2.0f;
  std::vector<float> before = out;
  switch (options & 3) {
    case 0:
      check(r.decompress<float>(payload, out).ok(), out, before);
      before = out;
      check(r.accumulate<float>(payload, out).ok(), out, before);
      break;
    case 1:
      check(r.accumulate_tensor<float>(arg % (r.get_layout().size() + 1), payload, out).ok(), out, before);
      break;
    case 2: {
      out.assign(16 * 16, 1.0f);
      before = out;
      check(hybrid().accumulate<float>(payload, out).ok(), out, before);
      break;
    }
    default: {
      out.assign(16 * 16, 1.0f);
      before = out;
      check(gm::accumulate_gathered<gm::acctfm<4>, float>(hybrid(), payload, 64 * (std::size_t{arg} + 1), out).ok(), out,
            before);
      break;
    }
  }
  return 0;
}
