#include "coherence/change_log.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace dsm {

// dsm_log() sets bit n % 8 of byte n / 8; the log reads them as line n % 64
// of word n / 64.
static_assert(std::endian::native == std::endian::little, "the log's bytes are its words' bytes");
static_assert(kLinesPerPage == 64, "one 64-bit word per page");

namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

static_assert(kPagesPerSummary == 8, "a summary byte's pages are one 512-bit vector");

// Takes the 8 page words behind one summary byte: the marked pages' numbers
// and masks go to pages[0..k) and masks[0..k), where k, returned, is how many
// words held marks (the slots up to 8 are written too); the words are
// cleared and their marks counted into *lines.
inline size_t TakeGroupPortable(uint64_t* words, uint32_t first_page, uint32_t* pages,
                                uint64_t* masks, size_t* lines) {
  // Without a branch per page: about half the pages of a sparse version have
  // no mark, in no order a predictor could learn. The slots past n are
  // overwritten by the next page.
  size_t n = 0;
  for (uint32_t j = 0; j < kPagesPerSummary; ++j) {
    pages[n] = first_page + j;
    masks[n] = words[j];
    *lines += static_cast<size_t>(std::popcount(words[j]));
    n += words[j] != 0;
    words[j] = 0;
  }
  return n;
}

// The same in a few vector instructions. The compress stays in registers
// and the stores are whole: a compressing store to memory is microcoded on
// some CPUs that have AVX-512.
#define DSM_TAKE_AVX512 __attribute__((target("avx512f,avx512vl,avx512vpopcntdq")))
DSM_TAKE_AVX512 inline size_t TakeGroupAvx512(uint64_t* words, uint32_t first_page, uint32_t* pages,
                                              uint64_t* masks, size_t* lines) {
  const __m512i w = _mm512_loadu_si512(words);
  const __mmask8 marked = _mm512_test_epi64_mask(w, w);
  _mm512_storeu_si512(masks, _mm512_maskz_compress_epi64(marked, w));
  const __m256i numbers = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first_page)),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(pages),
                      _mm256_maskz_compress_epi32(marked, numbers));
  for (size_t j = 0; j < kPagesPerSummary; ++j)
    *lines += static_cast<size_t>(std::popcount(words[j]));
  _mm512_storeu_si512(words, _mm512_setzero_si512());
  return static_cast<size_t>(std::popcount(static_cast<unsigned>(marked)));
}

// Every marked group of `summary` (zero padded to a multiple of 8 bytes,
// `groups` in use), taken with `take_group` and cleared; returns the pages.
// Inlined into each caller, so that the group's code is inlined too.
template <class TakeGroup>
__attribute__((always_inline)) inline size_t TakeMarkedGroups(uint8_t* summary, size_t groups,
                                                              uint64_t* words, uint32_t* pages,
                                                              uint64_t* masks, size_t* lines,
                                                              TakeGroup take_group) {
  size_t n = 0;
  for (size_t g = 0; g < groups; g += 8) {
    uint64_t s;
    std::memcpy(&s, summary + g, 8);
    if (s == 0) continue;
    std::memset(summary + g, 0, 8);
    while (s != 0) {
      const unsigned byte = static_cast<unsigned>(std::countr_zero(s)) / 8;
      s &= ~(uint64_t{0xff} << (8 * byte));
      const size_t first_page = (g + byte) * kPagesPerSummary;
      n += take_group(words + first_page, static_cast<uint32_t>(first_page), pages + n, masks + n,
                      lines);
    }
  }
  return n;
}

size_t TakeMarkedGroupsPortable(uint8_t* summary, size_t groups, uint64_t* words, uint32_t* pages,
                                uint64_t* masks, size_t* lines) {
  return TakeMarkedGroups(summary, groups, words, pages, masks, lines,
                          [](auto... a) { return TakeGroupPortable(a...); });
}

DSM_TAKE_AVX512 size_t TakeMarkedGroupsAvx512(uint8_t* summary, size_t groups, uint64_t* words,
                                              uint32_t* pages, uint64_t* masks, size_t* lines) {
  return TakeMarkedGroups(summary, groups, words, pages, masks, lines,
                          [](auto... a) DSM_TAKE_AVX512 { return TakeGroupAvx512(a...); });
}

bool CanTakeWithAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vpopcntdq");
}

auto take_marked_groups = CanTakeWithAvx512() ? TakeMarkedGroupsAvx512 : TakeMarkedGroupsPortable;

}  // namespace

void MarkLineBits(uint8_t* bits, uint8_t* summary, size_t first, size_t count) {
  if (count == 0) return;
  auto* words = reinterpret_cast<uint64_t*>(bits);
  const size_t end = first + count;
  for (size_t line = first; line < end;) {
    const size_t lo = line % kLinesPerPage;
    const size_t n = std::min(kLinesPerPage - lo, end - line);
    words[line / kLinesPerPage] |=
        n == kLinesPerPage ? ~uint64_t{0} : ((uint64_t{1} << n) - 1) << lo;
    line += n;
  }
  const size_t first_group = first / kLinesPerSummary;
  std::memset(summary + first_group, 1, (end - 1) / kLinesPerSummary - first_group + 1);
}

ChangeLog::ChangeLog(size_t area_bytes)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      pages_((lines_ + kLinesPerPage - 1) / kLinesPerPage),
      groups_((pages_ + kPagesPerSummary - 1) / kPagesPerSummary),
      words_(new uint64_t[groups_ * kPagesPerSummary]()),
      summary_(new uint8_t[RoundUp(groups_, 8) + 8]()) {}

void ChangeLog::MarkLines(size_t first, size_t count) {
  if (first >= lines_ || count == 0) return;
  MarkLineBits(bits(), summary(), first, std::min(count, lines_ - first));
}

void ChangeLog::MarkBytes(size_t offset, size_t len) {
  // Clip to the area before adding: a byte past the end touches no line (not even
  // a partial last one), and offset + len must not wrap around.
  if (len == 0 || offset >= area_bytes_) return;
  len = std::min(len, area_bytes_ - offset);
  const size_t first = offset / kLineBytes;
  const size_t last = (offset + len - 1) / kLineBytes;
  MarkLines(first, last - first + 1);
}

size_t ChangeLog::NextMarkedGroup(size_t group) const {
  // Unaligned start: check single bytes up to the next multiple of 8.
  while (group < groups_ && (group & 7) != 0) {
    if (summary_[group]) return group;
    ++group;
  }
  // The summary is zero-padded to a multiple of 8, so 8-byte loads stay in bounds.
  while (group < groups_) {
    uint64_t w;
    std::memcpy(&w, summary_.get() + group, 8);
    if (w != 0) return std::min(group + static_cast<size_t>(std::countr_zero(w)) / 8, groups_);
    group += 8;
  }
  return groups_;
}

bool ChangeLog::Empty() const {
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      if (words_[g * kPagesPerSummary + j] != 0) return false;
    }
  }
  return true;
}

size_t ChangeLog::CountLines() const {
  size_t n = 0;
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      n += static_cast<size_t>(std::popcount(words_[g * kPagesPerSummary + j]));
    }
  }
  return n;
}

void ChangeLog::Absorb(ChangeLog& other) {
  const size_t groups = std::min(groups_, other.groups_);
  for (size_t g = other.NextMarkedGroup(0); g < groups; g = other.NextMarkedGroup(g + 1)) {
    uint64_t* dst = words_.get() + g * kPagesPerSummary;
    uint64_t* src = other.words_.get() + g * kPagesPerSummary;
    uint64_t any = 0;
    for (size_t j = 0; j < kPagesPerSummary; ++j) {
      dst[j] |= src[j];
      any |= src[j];
      src[j] = 0;
    }
    if (any != 0) summary_[g] = 1;
    other.summary_[g] = 0;
  }
}

void ChangeLog::EnsureTakenRoom() {
  // Room for a whole group past the last page: pages are written before they
  // are known to have marks.
  if (taken_pages_.size() != pages_ + kPagesPerSummary) {
    taken_pages_.resize(pages_ + kPagesPerSummary);
    taken_masks_.resize(pages_ + kPagesPerSummary);
  }
}

ChangeLog::TakenPages ChangeLog::TakePages() {
  EnsureTakenRoom();
  size_t lines = 0;
  const size_t n = take_marked_groups(summary_.get(), groups_, words_.get(), taken_pages_.data(),
                                      taken_masks_.data(), &lines);
  return {std::span<const uint32_t>(taken_pages_.data(), n),
          std::span<const uint64_t>(taken_masks_.data(), n), lines};
}

namespace {

// ListLines without vectors: four lines per page are written whether the
// page has them or not, so the usual page of a sparse version (a line or
// two) costs no branch.
size_t ListLinesPortable(const uint32_t* pages, const uint64_t* masks, size_t n, uint32_t* out) {
  static_assert(ChangeLog::kListSlack >= 4, "the unrolled extractions below");
  uint32_t* const start = out;
  for (size_t k = 0; k < n; ++k) {
    uint64_t mask = masks[k];
    const auto first = static_cast<uint32_t>(pages[k] * kLinesPerPage);
    const auto count = static_cast<size_t>(std::popcount(mask));
    for (size_t i = 0; i < 4; ++i) {
      out[i] = first + static_cast<uint32_t>(std::countr_zero(mask));
      mask &= mask - 1;
    }
    for (size_t i = 4; i < count; ++i) {
      out[i] = first + static_cast<uint32_t>(std::countr_zero(mask));
      mask &= mask - 1;
    }
    out += count;
  }
  return static_cast<size_t>(out - start);
}

// The same with a page's line numbers compressed out of its mask in one
// instruction, and sixteen of them written whether the page has them or not.
// GCC 12's AVX-512 headers leave a lane "undefined" in the casts and
// extractions below and then warn about it (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define DSM_LIST_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2")))
DSM_LIST_AVX512 size_t ListLinesAvx512(const uint32_t* pages, const uint64_t* masks, size_t n,
                                       uint32_t* out) {
  static_assert(ChangeLog::kListSlack >= 16, "sixteen lines are written per page");
  alignas(64) static constexpr uint8_t kIota[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i iota = _mm512_load_si512(kIota);
  uint32_t* const start = out;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t mask = masks[k];
    const auto count = static_cast<size_t>(std::popcount(mask));
    const __m512i first = _mm512_set1_epi32(static_cast<int>(pages[k] * kLinesPerPage));
    const __m512i at = _mm512_maskz_compress_epi8(mask, iota);  // bit numbers, lowest first
    _mm512_storeu_si512(out,
                        _mm512_add_epi32(first, _mm512_cvtepu8_epi32(_mm512_castsi512_si128(at))));
    if (count > 16) [[unlikely]] {
      _mm512_storeu_si512(
          out + 16,
          _mm512_add_epi32(first, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(at, 1))));
      _mm512_storeu_si512(
          out + 32,
          _mm512_add_epi32(first, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(at, 2))));
      _mm512_storeu_si512(
          out + 48,
          _mm512_add_epi32(first, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(at, 3))));
    }
    out += count;
  }
  return static_cast<size_t>(out - start);
}
#pragma GCC diagnostic pop

bool CanListWithAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vbmi2");
}

auto list_lines = CanListWithAvx512() ? ListLinesAvx512 : ListLinesPortable;

}  // namespace

size_t ChangeLog::ListLines(std::span<const uint32_t> pages, std::span<const uint64_t> masks,
                            uint32_t* out) {
  return list_lines(pages.data(), masks.data(), pages.size(), out);
}

bool UseAvx512LogScans(bool on) {
  const bool was = take_marked_groups == TakeMarkedGroupsAvx512;
  take_marked_groups =
      on && CanTakeWithAvx512() ? TakeMarkedGroupsAvx512 : TakeMarkedGroupsPortable;
  list_lines = on && CanListWithAvx512() ? ListLinesAvx512 : ListLinesPortable;
  return was;
}

uint32_t* ChangeLog::ListRoom(size_t lines, size_t slack) {
  if (taken_lines_.size() < lines + slack) taken_lines_.resize(lines + slack);
  return taken_lines_.data();
}

void ChangeLog::Clear() {
  for (size_t g = NextMarkedGroup(0); g < groups_; g = NextMarkedGroup(g + 1)) {
    std::memset(words_.get() + g * kPagesPerSummary, 0, kPagesPerSummary * sizeof(uint64_t));
    summary_[g] = 0;
  }
}

}  // namespace dsm
