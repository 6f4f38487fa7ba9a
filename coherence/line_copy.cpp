#include "coherence/line_copy.h"

#include <emmintrin.h>

#include <cstring>

#include "coherence/constants.h"

namespace dsm {

void CopyLinesStreaming(uint8_t* dst, const uint8_t* src, size_t bytes) {
  if ((reinterpret_cast<uintptr_t>(dst) & 15) != 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // SSE2 (baseline x86-64): four 16-byte loads and streaming stores per line.
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

void StoreFence() { _mm_sfence(); }

}  // namespace dsm
