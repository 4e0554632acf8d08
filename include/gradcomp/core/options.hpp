#pragma once
// Named config members: a policy's config lists the members a tool may set by name
// (`static constexpr auto options()`, a tuple of `option`s), so that a binding or a command line
// reads and writes them with one loop instead of one line per member. Nothing here converts
// values: the tool does, by each member's type.

#include <tuple>
#include <type_traits>

namespace gradcomp {

// One settable member of Config: its public name and the member.
template <class Config, class T>
struct option {
  using config_type = Config;
  using value_type = T;
  // An alias, since nvcc's generated host code parenthesises `T Config::*member`.
  using member_pointer = T Config::*;
  const char* name;
  member_pointer member;
};
template <class Config, class T>
option(const char*, T Config::*) -> option<Config, T>;

// Config's named members: Config::options(), or none.
template <class Config>
constexpr auto options_of() {
  if constexpr (requires { Config::options(); })
    return Config::options();
  else
    return std::tuple<>{};
}

// f(name, member) for each option of a list (a tuple of `option`s) in c (const or not).
template <class Config, class List, class F>
constexpr void for_each_option(Config& c, const List& list, F&& f) {
  std::apply([&](const auto&... o) { (f(o.name, c.*o.member), ...); }, list);
}
// f(name, member) for each named member of c.
template <class Config, class F>
constexpr void for_each_option(Config& c, F&& f) {
  gradcomp::for_each_option(c, options_of<std::remove_const_t<Config>>(), f);
}

}  // namespace gradcomp
