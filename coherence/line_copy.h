// Copying whole 64-byte lines into reader buffers with non-temporal stores.
// A publish scatters lines over an area far larger than the caches; ordinary
// stores first read each destination line (read-for-ownership), streaming
// stores write it without reading it. Measured here (2 MiB pages, 64 MiB
// buffers, a loop of 4 KiB copies): 12.3 -> 19.6 GB/s. The copied lines leave
// this core's caches, which is where they are of no use: other processes
// read them.
//
// Streaming stores are weakly ordered: call StoreFence() after the copies and
// before making them visible to another thread or process (storing `latest`).
#ifndef DSM_COHERENCE_LINE_COPY_H_
#define DSM_COHERENCE_LINE_COPY_H_

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "coherence/constants.h"

namespace dsm {

// Runs shorter than this are copied with memcpy by CopyLines: in a writer's
// publish, lines scattered one by one measured no faster with streaming
// stores (1% and 10% of a 64 MiB area's lines: within noise and 10-15%
// slower), while whole pages gained 25% (bench/publish_bench on 2 MiB pages,
// 100% of the lines).
inline constexpr size_t kStreamingMinBytes = 1024;

// Copies `bytes` (a multiple of the line size) from src to dst with streaming
// stores where dst is 16-byte aligned (reader buffers are page-aligned),
// otherwise with memcpy: one 64-byte store per line where the processor has
// AVX-512 and dst is line-aligned (64 MiB, 1% of lines, memif 1500, medians
// of 4 alternated runs: 331 -> 415 rounds/s against four 16-byte stores).
void CopyLinesStreaming(uint8_t* dst, const uint8_t* src, size_t bytes);

// One line, with four 16-byte streaming stores (baseline x86-64, inline, for
// loops that copy line by line); `dst` is 16-byte aligned.
inline void StreamLine(uint8_t* dst, const uint8_t* src) {
  const auto* s = reinterpret_cast<const __m128i*>(src);
  auto* d = reinterpret_cast<__m128i*>(dst);
  const __m128i a = _mm_loadu_si128(s);
  const __m128i b = _mm_loadu_si128(s + 1);
  const __m128i c = _mm_loadu_si128(s + 2);
  const __m128i e = _mm_loadu_si128(s + 3);
  _mm_stream_si128(d, a);
  _mm_stream_si128(d + 1, b);
  _mm_stream_si128(d + 2, c);
  _mm_stream_si128(d + 3, e);
}

// Copies a run of whole lines: short runs inline with memcpy (a single line
// at constant size, a few moves), runs of kStreamingMinBytes or more with
// streaming stores.
inline void CopyLines(uint8_t* dst, const uint8_t* src, size_t bytes) {
  if (bytes == kLineBytes) {
    std::memcpy(dst, src, kLineBytes);
  } else if (bytes < kStreamingMinBytes) {
    std::memcpy(dst, src, bytes);
  } else {
    CopyLinesStreaming(dst, src, bytes);
  }
}

// How a copy stores its lines.
enum class LineStores {
  kByRunLength,  // CopyLines: memcpy for short runs, streaming for long ones
  // Streaming stores for every run, single lines included. For replicas:
  // dsmd scatters each version's lines over reader buffers no process has
  // touched since, and ordinary stores stall on those misses one after
  // another (store buffer full). Measured on the 2-host memif bench, 64 MiB,
  // 1% of lines per version: the receiving dsmd's CPU per version 1.2-1.8 ->
  // 0.95-1.1 ms, and the time from the last frame sent to the version
  // complete 0.56-0.72 -> 0.25-0.30 ms.
  kStreaming,
};

inline void CopyLines(uint8_t* dst, const uint8_t* src, size_t bytes, LineStores stores) {
  if (stores == LineStores::kStreaming) {
    CopyLinesStreaming(dst, src, bytes);
  } else {
    CopyLines(dst, src, bytes);
  }
}

// Orders every streaming store before it ahead of every store after it.
void StoreFence();

}  // namespace dsm

#endif  // DSM_COHERENCE_LINE_COPY_H_
