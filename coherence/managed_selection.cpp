#include "coherence/managed_selection.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsm {

namespace {

// Below this magnitude an old value counts as this: a change away from zero
// is then a very large relative change, not a division by zero.
constexpr float kTinyMagnitude = std::numeric_limits<float>::min();

// One element's priority: 0 for the same bits; |x - y| / max(|y|, tiny)
// (kRelative) or |x - y| (kAbsolute) for a finite change, never below the
// smallest float (different bits are a change, +0 and -0 too: the replica
// must end up byte-identical); infinite if either is not finite.
template <bool kAbsolute>
float ElementPriority(float x, float y) {
  if (std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y)) return 0.0f;
  if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<float>::infinity();
  const float change = std::fabs(x - y);
  const float rank = kAbsolute ? change : change / std::max(std::fabs(y), kTinyMagnitude);
  return std::max(rank, std::numeric_limits<float>::denorm_min());
}

// The same for a whole line, sixteen floats four at a time, without
// branches: a dense update ranks every line of the area at every version.
template <bool kAbsolute>
float LinePriority(const uint8_t* now, const uint8_t* had) {
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 least = _mm_set1_ps(std::numeric_limits<float>::denorm_min());
  const __m128 inf = _mm_set1_ps(std::numeric_limits<float>::infinity());
  __m128 most = _mm_setzero_ps();
  __m128 nonfinite = _mm_setzero_ps();
  for (size_t i = 0; i < kLineBytes; i += 16) {
    const __m128 x = _mm_loadu_ps(reinterpret_cast<const float*>(now + i));
    const __m128 y = _mm_loadu_ps(reinterpret_cast<const float*>(had + i));
    const __m128i same = _mm_cmpeq_epi32(_mm_castps_si128(x), _mm_castps_si128(y));
    const __m128 changed = _mm_castsi128_ps(_mm_xor_si128(same, _mm_set1_epi32(-1)));
    const __m128 abs_x = _mm_andnot_ps(sign, x);
    const __m128 abs_y = _mm_andnot_ps(sign, y);
    // Not finite: |v| > largest float, or NaN (unordered with itself).
    nonfinite = _mm_or_ps(nonfinite, _mm_and_ps(changed, _mm_or_ps(_mm_cmpnlt_ps(abs_x, inf),
                                                                   _mm_cmpnlt_ps(abs_y, inf))));
    nonfinite = _mm_or_ps(nonfinite, _mm_and_ps(changed, _mm_cmpunord_ps(x, y)));
    __m128 rank = _mm_andnot_ps(sign, _mm_sub_ps(x, y));
    if constexpr (!kAbsolute) {
      rank = _mm_div_ps(rank, _mm_max_ps(abs_y, _mm_set1_ps(kTinyMagnitude)));
    }
    most = _mm_max_ps(most, _mm_and_ps(changed, _mm_max_ps(rank, least)));
  }
  if (_mm_movemask_ps(nonfinite) != 0) return std::numeric_limits<float>::infinity();
  most = _mm_max_ps(most, _mm_movehl_ps(most, most));
  most = _mm_max_ss(most, _mm_shuffle_ps(most, most, 1));
  return _mm_cvtss_f32(most);
}

// The same, sixteen floats at once (AVX-512F): the ranking of a dense update
// is half arithmetic. Identical results: the same IEEE operations per element.
// (GCC 12's unmasked AVX-512 intrinsics pass an undefined vector as the
// masked-off source, which -Wmaybe-uninitialized reports.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool kAbsolute>
__attribute__((target("avx512f"))) float LinePriorityAvx512(const uint8_t* now,
                                                            const uint8_t* had) {
  const __m512 x = _mm512_loadu_ps(now);
  const __m512 y = _mm512_loadu_ps(had);
  const __mmask16 changed =
      _mm512_cmpneq_epi32_mask(_mm512_castps_si512(x), _mm512_castps_si512(y));
  if (changed == 0) return 0.0f;
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 abs_y = _mm512_abs_ps(y);
  // Not finite: |v| not below the largest float's successor, or NaN.
  const __mmask16 nonfinite = _mm512_mask_cmp_ps_mask(changed, _mm512_abs_ps(x), inf, _CMP_NLT_UQ) |
                              _mm512_mask_cmp_ps_mask(changed, abs_y, inf, _CMP_NLT_UQ);
  if (nonfinite != 0) return std::numeric_limits<float>::infinity();
  __m512 rank = _mm512_abs_ps(_mm512_sub_ps(x, y));
  if constexpr (!kAbsolute) {
    rank = _mm512_div_ps(rank, _mm512_max_ps(abs_y, _mm512_set1_ps(kTinyMagnitude)));
  }
  rank = _mm512_max_ps(rank, _mm512_set1_ps(std::numeric_limits<float>::denorm_min()));
  // The largest over the changed elements (the others 0: every rank is > 0),
  // folded by halves (GCC 12's reduce intrinsics warn of undefined inputs).
  __m512 most = _mm512_maskz_mov_ps(changed, rank);
  most = _mm512_max_ps(most, _mm512_shuffle_f32x4(most, most, _MM_SHUFFLE(1, 0, 3, 2)));
  most = _mm512_max_ps(most, _mm512_shuffle_f32x4(most, most, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 low = _mm512_castps512_ps128(most);
  low = _mm_max_ps(low, _mm_movehl_ps(low, low));
  low = _mm_max_ss(low, _mm_shuffle_ps(low, low, 1));
  return _mm_cvtss_f32(low);
}

// Ranks the lines of `mask` (whole lines of one page) into out[bit].
template <bool kAbsolute>
void RankLinesSse2(const uint8_t* now, const uint8_t* had, uint64_t mask, float* out) {
  for (; mask != 0; mask &= mask - 1) {
    const size_t i = static_cast<size_t>(std::countr_zero(mask));
    out[i] = LinePriority<kAbsolute>(now + i * kLineBytes, had + i * kLineBytes);
  }
}

template <bool kAbsolute>
__attribute__((target("avx512f"))) void RankLinesAvx512(const uint8_t* now, const uint8_t* had,
                                                        uint64_t mask, float* out) {
  for (; mask != 0; mask &= mask - 1) {
    const size_t i = static_cast<size_t>(std::countr_zero(mask));
    out[i] = LinePriorityAvx512<kAbsolute>(now + i * kLineBytes, had + i * kLineBytes);
  }
}

// Per-page bookkeeping over a page's 64 per-line values (arrays padded to
// whole pages): each returns a mask of the lines in `mask` that pass.
uint64_t NonZeroScalar(const float* p, uint64_t mask) {
  uint64_t out = 0;
  for (uint64_t m = mask; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (p[i] != 0.0f) out |= uint64_t{1} << i;
  }
  return out;
}

uint64_t AtMostScalar(const uint64_t* v, uint64_t mask, uint64_t limit) {
  uint64_t out = 0;
  for (uint64_t m = mask; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (v[i] <= limit) out |= uint64_t{1} << i;
  }
  return out;
}

// Priorities are never negative or NaN, so they order as their bits.
uint64_t BitsAtLeastScalar(const float* p, uint64_t mask, uint32_t floor) {
  uint64_t out = 0;
  for (uint64_t m = mask; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (std::bit_cast<uint32_t>(p[i]) >= floor) out |= uint64_t{1} << i;
  }
  return out;
}

uint64_t MinScalar(const uint64_t* v, uint64_t mask) {
  uint64_t least = UINT64_MAX;
  for (uint64_t m = mask; m != 0; m &= m - 1) least = std::min(least, v[std::countr_zero(m)]);
  return least;
}

__attribute__((target("avx512f"))) uint64_t NonZeroAvx512(const float* p, uint64_t mask) {
  uint64_t out = 0;
  for (int k = 0; k < 4; ++k) {
    const __mmask16 m =
        _mm512_cmp_ps_mask(_mm512_loadu_ps(p + 16 * k), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    out |= uint64_t{m} << (16 * k);
  }
  return out & mask;
}

__attribute__((target("avx512f"))) uint64_t AtMostAvx512(const uint64_t* v, uint64_t mask,
                                                         uint64_t limit) {
  const __m512i bound = _mm512_set1_epi64(static_cast<long long>(limit));
  uint64_t out = 0;
  for (int k = 0; k < 8; ++k) {
    const __mmask8 m = _mm512_cmple_epu64_mask(_mm512_loadu_si512(v + 8 * k), bound);
    out |= uint64_t{m} << (8 * k);
  }
  return out & mask;
}

__attribute__((target("avx512f"))) uint64_t BitsAtLeastAvx512(const float* p, uint64_t mask,
                                                              uint32_t floor) {
  const __m512i bound = _mm512_set1_epi32(static_cast<int>(floor));
  uint64_t out = 0;
  for (int k = 0; k < 4; ++k) {
    const __mmask16 m = _mm512_cmpge_epu32_mask(_mm512_loadu_si512(p + 16 * k), bound);
    out |= uint64_t{m} << (16 * k);
  }
  return out & mask;
}

__attribute__((target("avx512f"))) uint64_t MinAvx512(const uint64_t* v, uint64_t mask) {
  __m512i least = _mm512_set1_epi64(-1);
  for (int k = 0; k < 8; ++k) {
    const auto m = static_cast<__mmask8>(mask >> (8 * k));
    least = _mm512_mask_min_epu64(least, m, least, _mm512_loadu_si512(v + 8 * k));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, least);
  return *std::min_element(lanes, lanes + 8);
}

#pragma GCC diagnostic pop

bool use_avx512 = __builtin_cpu_supports("avx512f");

struct PageKernels {
  uint64_t (*non_zero)(const float*, uint64_t);
  uint64_t (*at_most)(const uint64_t*, uint64_t, uint64_t);
  uint64_t (*bits_at_least)(const float*, uint64_t, uint32_t);
  uint64_t (*min)(const uint64_t*, uint64_t);
};

PageKernels Kernels() {
  if (use_avx512) return {NonZeroAvx512, AtMostAvx512, BitsAtLeastAvx512, MinAvx512};
  return {NonZeroScalar, AtMostScalar, BitsAtLeastScalar, MinScalar};
}

void AddLine(LineSet* set, size_t line) {
  set->AddMask(line / kLinesPerPage, uint64_t{1} << (line % kLinesPerPage));
}

}  // namespace

ManagedSelection::ManagedSelection(size_t area_bytes, const ManagedParams& params)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      params_(params),
      sent_(lines_ * kLineBytes, 0),
      priority_((lines_ + 63) / 64 * 64, 0.0f),
      first_unsent_((lines_ + 63) / 64 * 64, 0),
      residual_((lines_ + 63) / 64, 0),
      candidates_(residual_.size(), 0) {}

float ManagedSelection::Priority(size_t line, const uint8_t* current) const {
  const size_t begin = line * kLineBytes;
  const size_t end = std::min(begin + kLineBytes, area_bytes_);
  const uint8_t* now = current + begin;
  const uint8_t* had = sent_.data() + begin;
  const bool absolute = params_.rank == ManagedRank::kAbsolute;
  if (end - begin == kLineBytes) {
    return absolute ? LinePriority<true>(now, had) : LinePriority<false>(now, had);
  }
  // A partial last line: its whole floats, then any changed byte after them.
  const size_t elements = (end - begin) / sizeof(float);
  float most = 0.0f;
  for (size_t i = 0; i < elements; ++i) {
    float x, y;
    std::memcpy(&x, now + i * sizeof(float), sizeof(float));
    std::memcpy(&y, had + i * sizeof(float), sizeof(float));
    most = std::max(most, absolute ? ElementPriority<true>(x, y) : ElementPriority<false>(x, y));
  }
  const size_t tail = elements * sizeof(float);
  if (std::memcmp(now + tail, had + tail, (end - begin) - tail) != 0) {
    return std::numeric_limits<float>::infinity();
  }
  return most;
}

void ManagedSelection::ChooseHighest(size_t take, LineSet* send) {
  if (take == 0) return;
  if (take >= candidate_count_) {
    for (size_t page = 0; page < candidates_.size(); ++page) {
      if (candidates_[page] != 0) send->AddMask(page, candidates_[page]);
    }
    return;
  }
  // A radix select: priorities are never negative or NaN, so they order as
  // their bits. Select counted the candidates by their top 16 bits; find the
  // bucket the take-th highest falls in. Every candidate above it goes, and
  // of that bucket the highest (equal ones by line) make up the rest.
  size_t above = 0;
  uint32_t bucket = (1u << 16) - 1;
  while (above + histogram_[bucket] < take) above += histogram_[bucket--];
  const PageKernels k = Kernels();
  const uint32_t in_bucket = bucket << 16;
  const uint32_t over_bucket = in_bucket + (1u << 16);  // 0 past the top bucket: none above
  boundary_.clear();
  for (size_t page = 0; page < candidates_.size(); ++page) {
    const uint64_t cand = candidates_[page];
    if (cand == 0) continue;
    const float* p = &priority_[page * kLinesPerPage];
    const uint64_t at_least = k.bits_at_least(p, cand, in_bucket);
    if (at_least == 0) continue;
    const uint64_t over = over_bucket == 0 ? 0 : k.bits_at_least(p, at_least, over_bucket);
    if (over != 0) send->AddMask(page, over);
    for (uint64_t m = at_least & ~over; m != 0; m &= m - 1) {
      const auto line =
          static_cast<uint32_t>(page * kLinesPerPage + static_cast<size_t>(std::countr_zero(m)));
      boundary_.push_back({priority_[line], line});
    }
  }
  const size_t rest = take - above;
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.priority > b.priority || (a.priority == b.priority && a.line < b.line);
  };
  if (rest < boundary_.size()) {
    std::nth_element(boundary_.begin(), boundary_.begin() + static_cast<ptrdiff_t>(rest),
                     boundary_.end(), before);
  }
  for (size_t i = 0; i < rest; ++i) AddLine(send, boundary_[i].line);
}

ManagedChoice ManagedSelection::Select(uint64_t version, const LineSet& changed,
                                       const uint8_t* current, size_t budget_bytes, LineSet* send) {
  send->Clear();
  ManagedChoice choice;
  // One pass, page by page (a page's 64 lines are a word of the residual),
  // in address order so that the reads stream; after the ranking, a page's
  // bookkeeping is mask arithmetic over its 64 lines. What changed joins the
  // residual (from this version on if it was not there), with its priority
  // against what readers have. A waiting line leaves it only when sent, even
  // if its bytes are back to sent_: a reader may hold newer bytes of it than
  // sent_ (a whole-area transfer, or a resend framed from a newer version,
  // carries the pinned buffer's bytes), and must get it once more.
  // Then each waiting line is due (it would lag too long: it goes now) or a
  // candidate for the budget, counted by its priority's top bits.
  const size_t whole_lines = area_bytes_ / kLineBytes;
  const bool absolute = params_.rank == ManagedRank::kAbsolute;
  auto* const rank_lines = use_avx512 ? (absolute ? RankLinesAvx512<true> : RankLinesAvx512<false>)
                                      : (absolute ? RankLinesSse2<true> : RankLinesSse2<false>);
  const PageKernels k = Kernels();
  // Due: first_unsent + max_line_age <= version.
  const bool any_due = version >= params_.max_line_age;
  const uint64_t due_limit = any_due ? version - params_.max_line_age : 0;
  histogram_.assign(size_t{1} << 16, 0);
  candidate_count_ = 0;
  for (size_t page = 0; page < residual_.size(); ++page) {
    const uint64_t was = residual_[page];
    uint64_t word = was;
    const size_t first = page * kLinesPerPage;
    uint64_t written = changed.mask(page);
    if (first + kLinesPerPage > lines_) written &= (uint64_t{1} << (lines_ - first)) - 1;
    if (written != 0) {
      // Whole lines at once; a partial last line (the last page's) on its own.
      uint64_t whole = written;
      if (first + kLinesPerPage > whole_lines) {
        whole &= whole_lines > first ? (uint64_t{1} << (whole_lines - first)) - 1 : 0;
      }
      rank_lines(current + first * kLineBytes, sent_.data() + first * kLineBytes, whole,
                 &priority_[first]);
      if (written != whole) priority_[whole_lines] = Priority(whole_lines, current);
      const uint64_t moved = k.non_zero(&priority_[first], written);
      const uint64_t joins = moved & ~word;
      word |= joins;
      for (uint64_t m = joins; m != 0; m &= m - 1) {
        first_unsent_[first + static_cast<size_t>(std::countr_zero(m))] = version;
      }
      residual_count_ += static_cast<size_t>(std::popcount(word));
      residual_count_ -= static_cast<size_t>(std::popcount(was));
      residual_[page] = word;
    }
    if (word == 0) {
      candidates_[page] = 0;
      continue;
    }
    const uint64_t due = any_due ? k.at_most(&first_unsent_[first], word, due_limit) : 0;
    const uint64_t cand = word & ~due;
    candidates_[page] = cand;
    candidate_count_ += static_cast<size_t>(std::popcount(cand));
    for (uint64_t m = cand; m != 0; m &= m - 1) {
      ++histogram_[std::bit_cast<uint32_t>(
                       priority_[first + static_cast<size_t>(std::countr_zero(m))]) >>
                   16];
    }
    if (due != 0) {
      send->AddMask(page, due);
      choice.due_lines += static_cast<size_t>(std::popcount(due));
    }
  }
  const size_t budget_lines = budget_bytes / kLineBytes;
  if (choice.due_lines > budget_lines) {
    choice.over_budget = (choice.due_lines - budget_lines) * kLineBytes;
  }
  const size_t room = budget_lines > choice.due_lines ? budget_lines - choice.due_lines : 0;
  const size_t take = std::min(room, candidate_count_);
  ChooseHighest(take, send);

  // What goes becomes what readers have. (first_unsent_ means nothing for a
  // line that does not wait.)
  send->ForEachPage([&](size_t page, uint64_t mask) {
    residual_count_ -= static_cast<size_t>(std::popcount(residual_[page] & mask));
    residual_[page] &= ~mask;
    for (; mask != 0; mask &= mask - 1) {
      const size_t line = page * kLinesPerPage + static_cast<size_t>(std::countr_zero(mask));
      const size_t at = line * kLineBytes;
      std::memcpy(sent_.data() + at, current + at, kLineBytes);
      priority_[line] = 0.0f;
    }
  });
  choice.lines = choice.due_lines + take;
  choice.residual = residual_count_;
  return choice;
}

void ManagedSelection::Reset(const uint8_t* current) {
  std::memcpy(sent_.data(), current, sent_.size());
  std::fill(residual_.begin(), residual_.end(), 0);
  std::fill(first_unsent_.begin(), first_unsent_.end(), 0);
  std::fill(priority_.begin(), priority_.end(), 0.0f);
  residual_count_ = 0;
}

uint64_t ManagedSelection::OldestLag(uint64_t version) const {
  const PageKernels k = Kernels();
  uint64_t oldest = UINT64_MAX;
  for (size_t page = 0; page < residual_.size(); ++page) {
    if (residual_[page] != 0) {
      oldest = std::min(oldest, k.min(&first_unsent_[page * kLinesPerPage], residual_[page]));
    }
  }
  return oldest == UINT64_MAX || oldest > version ? 0 : version - oldest + 1;
}

bool UseAvx512ManagedRanking(bool on) {
  const bool was = use_avx512;
  use_avx512 = on && __builtin_cpu_supports("avx512f");
  return was;
}

}  // namespace dsm
