#pragma once
// How a backend writes a call's large outputs (the `stores` field of a compressor's config):
// decided by the call's own output size (automatic), or always non-temporal (streaming), or
// never (cached). A call sees only its own output: a trainer that decompresses a large buffer
// one chunk per call and reads it only later says streaming; one that reads each compressed
// frame at once says cached. The bytes written are the same. The CPU backend interprets it
// (cpu/stores.hpp); the name gradcomp::cpu::stores is the same type.

#include <cstdint>

namespace gradcomp {

enum class stores : std::uint8_t { automatic, streaming, cached };

namespace cpu {
using gradcomp::stores;
}  // namespace cpu

}  // namespace gradcomp
