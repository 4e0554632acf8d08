// Packaging consumer for gradcomp::cuda. Host code only, so it runs without a
// GPU; it proves that the package's CUDA target, include paths and language
// level work in a CUDA translation unit.
#include <gradcomp/gradcomp.hpp>
#if __has_include(<gradcomp/cuda.cuh>)
#include <gradcomp/cuda.cuh>
#endif

#include <cstddef>
#include <cstdint>
#include <span>

int main() {
  const char s[] = "123456789";
  return gradcomp::crc32c(std::as_bytes(std::span(s, 9))) == 0xE3069283u ? 0 : 1;
}
