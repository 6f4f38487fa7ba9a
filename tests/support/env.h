// Test knobs from the environment (soak lengths, seeds).
#ifndef DSM_TESTS_SUPPORT_ENV_H_
#define DSM_TESTS_SUPPORT_ENV_H_

#include <cstdint>
#include <cstdlib>

namespace dsm::testing {

// $name as a number, or `fallback` when unset or empty.
inline uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_ENV_H_
