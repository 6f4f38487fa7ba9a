#include "coherence/line_copy.h"

#include <immintrin.h>

#include <cstring>

#include "coherence/constants.h"

namespace dsm {

namespace {

// One 64-byte streaming store per line: the line leaves in one piece, as a
// full write-combining buffer, rather than as four partial ones.
__attribute__((target("avx512f"))) void StreamLinesAvx512(uint8_t* dst, const uint8_t* src,
                                                          size_t bytes) {
  for (size_t off = 0; off < bytes; off += kLineBytes) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + off), _mm512_loadu_si512(src + off));
  }
}

// SSE2 (baseline x86-64): four 16-byte loads and streaming stores per line.
void StreamLinesSse2(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += kLineBytes) StreamLine(dst + off, src + off);
}

const bool kAvx512 = __builtin_cpu_supports("avx512f");

}  // namespace

void CopyLinesStreaming(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(dst);
  if (kAvx512 && (at & 63) == 0) {
    StreamLinesAvx512(dst, src, bytes);
  } else if ((at & 15) == 0) {
    StreamLinesSse2(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void StoreFence() { _mm_sfence(); }

}  // namespace dsm
