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

#pragma GCC diagnostic pop

bool use_avx512 = __builtin_cpu_supports("avx512f");

void AddLine(LineSet* set, size_t line) {
  set->AddMask(line / kLinesPerPage, uint64_t{1} << (line % kLinesPerPage));
}

}  // namespace

ManagedSelection::ManagedSelection(size_t area_bytes, const ManagedParams& params)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      params_(params),
      sent_(lines_ * kLineBytes, 0),
      priority_(lines_, 0.0f),
      first_unsent_(lines_, 0),
      residual_((lines_ + 63) / 64, 0) {}

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
  // Candidates are in address order: their lines go to `send` a page's mask
  // at a time.
  uint64_t page = 0, mask = 0;
  auto add = [&](uint32_t line) {
    if (line / kLinesPerPage != page) {
      send->AddMask(page, mask);
      page = line / kLinesPerPage;
      mask = 0;
    }
    mask |= uint64_t{1} << (line % kLinesPerPage);
  };
  if (take >= candidates_.size()) {
    for (const Candidate& c : candidates_) add(c.line);
    send->AddMask(page, mask);
    return;
  }
  // A radix select: priorities are never negative or NaN, so they order as
  // their bits. Count them by their top 16 bits, find the bucket the
  // take-th highest falls in; every candidate above it goes, and of that
  // bucket the highest (equal ones by line) make up the rest.
  histogram_.assign(size_t{1} << 16, 0);
  for (const Candidate& c : candidates_) ++histogram_[std::bit_cast<uint32_t>(c.priority) >> 16];
  size_t above = 0;
  uint32_t bucket = (1u << 16) - 1;
  while (above + histogram_[bucket] < take) above += histogram_[bucket--];
  boundary_.clear();
  for (const Candidate& c : candidates_) {
    const uint32_t b = std::bit_cast<uint32_t>(c.priority) >> 16;
    if (b > bucket) {
      add(c.line);
    } else if (b == bucket) {
      boundary_.push_back(c);
    }
  }
  send->AddMask(page, mask);
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
  candidates_.clear();
  // One pass, page by page (a page's 64 lines are a word of the residual),
  // in address order so that the reads stream. What changed joins the
  // residual (from this version on if it was not there), with its priority
  // against what readers have; a line back to what they have leaves it.
  // Then each waiting line is due (it would lag too long: it goes now) or a
  // candidate for the budget.
  const size_t whole_lines = area_bytes_ / kLineBytes;
  const bool absolute = params_.rank == ManagedRank::kAbsolute;
  auto* const rank_lines = use_avx512 ? (absolute ? RankLinesAvx512<true> : RankLinesAvx512<false>)
                                      : (absolute ? RankLinesSse2<true> : RankLinesSse2<false>);
  for (size_t page = 0; page < residual_.size(); ++page) {
    uint64_t word = residual_[page];
    const size_t first = page * kLinesPerPage;
    uint64_t written = changed.mask(page);
    if (first + kLinesPerPage > lines_) written &= (uint64_t{1} << (lines_ - first)) - 1;
    // Whole lines at once; a partial last line (the last page's) on its own.
    uint64_t whole = written;
    if (first + kLinesPerPage > whole_lines) {
      whole &= whole_lines > first ? (uint64_t{1} << (whole_lines - first)) - 1 : 0;
    }
    rank_lines(current + first * kLineBytes, sent_.data() + first * kLineBytes, whole,
               &priority_[first]);
    if (written != whole) priority_[whole_lines] = Priority(whole_lines, current);
    for (; written != 0; written &= written - 1) {
      const size_t line = first + static_cast<size_t>(std::countr_zero(written));
      const float p = priority_[line];
      const uint64_t bit = uint64_t{1} << (line % kLinesPerPage);
      if (p == 0.0f) {
        word &= ~bit;
      } else if (!(word & bit)) {
        word |= bit;
        first_unsent_[line] = version;
      }
    }
    residual_count_ += static_cast<size_t>(std::popcount(word));
    residual_count_ -= static_cast<size_t>(std::popcount(residual_[page]));
    residual_[page] = word;
    uint64_t due = 0;
    for (uint64_t bits = word; bits != 0; bits &= bits - 1) {
      const auto line =
          static_cast<uint32_t>(page * kLinesPerPage + static_cast<size_t>(std::countr_zero(bits)));
      if (first_unsent_[line] + params_.max_line_age <= version) {
        due |= bits & -bits;
      } else {
        candidates_.push_back({priority_[line], line});
      }
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
  const size_t take = std::min(room, candidates_.size());
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
  uint64_t oldest = 0;
  for (size_t w = 0; w < residual_.size(); ++w) {
    for (uint64_t bits = residual_[w]; bits != 0; bits &= bits - 1) {
      const uint64_t first = first_unsent_[w * 64 + static_cast<size_t>(std::countr_zero(bits))];
      if (oldest == 0 || first < oldest) oldest = first;
    }
  }
  return oldest == 0 || oldest > version ? 0 : version - oldest + 1;
}

bool UseAvx512ManagedRanking(bool on) {
  const bool was = use_avx512;
  use_avx512 = on && __builtin_cpu_supports("avx512f");
  return was;
}

}  // namespace dsm
