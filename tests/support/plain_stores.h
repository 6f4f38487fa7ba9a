// Changes a buffer the way ML code does, with no dsm_log: one of memcpy,
// std::sort, std::fill or a hand-written loop of stores, at seeded random places.
// Used by the page-tracking tests on one host and across hosts.
#ifndef DSM_TESTS_SUPPORT_PLAIN_STORES_H_
#define DSM_TESTS_SUPPORT_PLAIN_STORES_H_

#include <cstddef>
#include <cstdint>
#include <random>

namespace dsm::testing {

// Mutation `round` (the kind is round % 4) of the `bytes`-byte buffer at `area`.
// Always changes at least one byte.
void PlainStoreMutation(uint8_t* area, size_t bytes, uint64_t round, std::mt19937_64& rng);

}  // namespace dsm::testing

#endif  // DSM_TESTS_SUPPORT_PLAIN_STORES_H_
