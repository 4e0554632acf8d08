#include <gradcomp/core/version.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>

TEST_CASE("version macros are 0.1.0") {
  CHECK(GRADCOMP_VERSION_MAJOR == 0);
  CHECK(GRADCOMP_VERSION_MINOR == 1);
  CHECK(GRADCOMP_VERSION_PATCH == 0);
}

TEST_CASE("gradcomp::version and gradcomp::version_string are the macros' version") {
  static_assert(gradcomp::version == gradcomp::version_number{GRADCOMP_VERSION_MAJOR, GRADCOMP_VERSION_MINOR,
                                                             GRADCOMP_VERSION_PATCH});
  static_assert(gradcomp::version > gradcomp::version_number{0, 0, 9});
  static_assert(gradcomp::version < gradcomp::version_number{GRADCOMP_VERSION_MAJOR + 1, 0, 0});
  const std::string expected = std::to_string(GRADCOMP_VERSION_MAJOR) + "." + std::to_string(GRADCOMP_VERSION_MINOR) +
                               "." + std::to_string(GRADCOMP_VERSION_PATCH);
  CHECK(std::string_view(gradcomp::version_string) == expected);
  CHECK(std::string_view(GRADCOMP_VERSION_STRING) == expected);
}

#if defined(GRADCOMP_TEST_PROJECT_VERSION_MAJOR)
TEST_CASE("version macros and gradcomp::version agree with the CMake project version") {
  CHECK(GRADCOMP_VERSION_MAJOR == GRADCOMP_TEST_PROJECT_VERSION_MAJOR);
  CHECK(GRADCOMP_VERSION_MINOR == GRADCOMP_TEST_PROJECT_VERSION_MINOR);
  CHECK(GRADCOMP_VERSION_PATCH == GRADCOMP_TEST_PROJECT_VERSION_PATCH);
  CHECK(gradcomp::version == gradcomp::version_number{GRADCOMP_TEST_PROJECT_VERSION_MAJOR,
                                                      GRADCOMP_TEST_PROJECT_VERSION_MINOR,
                                                      GRADCOMP_TEST_PROJECT_VERSION_PATCH});
}
#endif
