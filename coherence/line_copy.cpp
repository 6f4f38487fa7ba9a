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
  for (size_t off = 0; off < bytes; off += kLineBytes) {
    const auto* s = reinterpret_cast<const __m128i*>(src + off);
    auto* d = reinterpret_cast<__m128i*>(dst + off);
    const __m128i a = _mm_loadu_si128(s);
    const __m128i b = _mm_loadu_si128(s + 1);
    const __m128i c = _mm_loadu_si128(s + 2);
    const __m128i e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
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
