// Packaging consumer: compiled with -Wall and no -Werror. The unused variable
// below is deliberate: if gradcomp leaked -Werror into consumers, it would
// turn this warning into an error.
#include <gradcomp/gradcomp.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

int main() {
  int deliberately_unused = 0;
  const char s[] = "123456789";
  return gradcomp::crc32c(std::as_bytes(std::span(s, 9))) == 0xE3069283u ? 0 : 1;
}
