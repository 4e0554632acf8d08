#pragma once
// The library's version, MAJOR.MINOR.PATCH: the macros for the preprocessor, gradcomp::version
// and gradcomp::version_string for code. CMake's project(VERSION), python/pyproject.toml,
// gradcomp.__version__, conanfile.py and ports/gradcomp/vcpkg.json carry the same number
// (tests/packaging/versions.cmake holds them equal).

#include <compare>

#define GRADCOMP_VERSION_MAJOR 0
#define GRADCOMP_VERSION_MINOR 1
#define GRADCOMP_VERSION_PATCH 0

#define GRADCOMP_VERSION_STR_(x) #x
#define GRADCOMP_VERSION_STR(x) GRADCOMP_VERSION_STR_(x)
// "MAJOR.MINOR.PATCH", a string literal.
#define GRADCOMP_VERSION_STRING                                                                     \
  GRADCOMP_VERSION_STR(GRADCOMP_VERSION_MAJOR)                                                      \
  "." GRADCOMP_VERSION_STR(GRADCOMP_VERSION_MINOR) "." GRADCOMP_VERSION_STR(GRADCOMP_VERSION_PATCH)

namespace gradcomp {

// A version number; versions compare by major, then minor, then patch.
struct version_number {
  int major;
  int minor;
  int patch;
  friend constexpr auto operator<=>(const version_number&, const version_number&) = default;
};

// This library's version, e.g. static_assert(gradcomp::version >= gradcomp::version_number{0, 1, 0}).
inline constexpr version_number version{GRADCOMP_VERSION_MAJOR, GRADCOMP_VERSION_MINOR, GRADCOMP_VERSION_PATCH};
// The same, as "MAJOR.MINOR.PATCH".
inline constexpr const char version_string[] = GRADCOMP_VERSION_STRING;

}  // namespace gradcomp
