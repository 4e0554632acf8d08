#pragma once
// The CPU versions (cpu/dispatch.hpp) a test can run on this machine, and a scope that
// limits cpu::detail::run_best() to one of them, restored even when a REQUIRE fails.
#include <gradcomp/cpu/dispatch.hpp>

#include <vector>

namespace gradcomp::test {

// Every version this CPU can run, lowest first.
inline std::vector<cpu::isa> isas() {
  std::vector<cpu::isa> all;
  const cpu::isa saved = cpu::isa_limit().load();
  cpu::isa_limit() = cpu::isa::avx512;
  const cpu::isa best = cpu::active_isa();
  cpu::isa_limit() = saved;
  for (cpu::isa i : {cpu::isa::baseline, cpu::isa::avx2, cpu::isa::avx512})
    if (i <= best) all.push_back(i);
  return all;
}

struct isa_scope {
  cpu::isa saved = cpu::isa_limit().load();
  explicit isa_scope(cpu::isa limit) { cpu::isa_limit() = limit; }
  ~isa_scope() { cpu::isa_limit() = saved; }
  isa_scope(const isa_scope&) = delete;
  isa_scope& operator=(const isa_scope&) = delete;
};

}  // namespace gradcomp::test
