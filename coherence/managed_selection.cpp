#include "coherence/managed_selection.h"

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

}  // namespace

ManagedSelection::ManagedSelection(size_t area_bytes, const ManagedParams& params)
    : area_bytes_(area_bytes),
      lines_((area_bytes + kLineBytes - 1) / kLineBytes),
      params_(params),
      sent_(lines_ * kLineBytes, 0),
      priority_(lines_, 0.0f),
      first_unsent_(lines_, 0) {}

float ManagedSelection::Priority(size_t line, const uint8_t* current) const {
  const size_t begin = line * kLineBytes;
  const size_t end = std::min(begin + kLineBytes, area_bytes_);
  const uint8_t* now = current + begin;
  const uint8_t* had = sent_.data() + begin;
  const size_t elements = (end - begin) / sizeof(float);
  float most = 0.0f;
  for (size_t i = 0; i < elements; ++i) {
    uint32_t now_bits, had_bits;
    std::memcpy(&now_bits, now + i * sizeof(float), sizeof(float));
    std::memcpy(&had_bits, had + i * sizeof(float), sizeof(float));
    if (now_bits == had_bits) continue;
    const float x = std::bit_cast<float>(now_bits);
    const float y = std::bit_cast<float>(had_bits);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<float>::infinity();
    const float relative = std::fabs(x - y) / std::max(std::fabs(y), kTinyMagnitude);
    // Different bits are a change, however small (+0 and -0 too): the
    // replica must end up byte-identical.
    most = std::max({most, relative, std::numeric_limits<float>::denorm_min()});
  }
  const size_t tail = elements * sizeof(float);
  if (std::memcmp(now + tail, had + tail, (end - begin) - tail) != 0) {
    return std::numeric_limits<float>::infinity();
  }
  return most;
}

void ManagedSelection::MarkSent(uint32_t line, const uint8_t* current) {
  std::memcpy(sent_.data() + size_t{line} * kLineBytes, current + size_t{line} * kLineBytes,
              kLineBytes);
  first_unsent_[line] = 0;
  priority_[line] = 0.0f;
}

ManagedChoice ManagedSelection::Select(uint64_t version, const LineSet& changed,
                                       const uint8_t* current, size_t budget_bytes, LineSet* send) {
  send->Clear();
  // What changed joins the residual (from this version on if it was not
  // there), with its priority against what readers have; a line back to
  // what they have leaves it.
  changed.ForEachPage([&](size_t page, uint64_t mask) {
    for (; mask != 0; mask &= mask - 1) {
      const size_t line = page * kLinesPerPage + static_cast<size_t>(std::countr_zero(mask));
      if (line >= lines_) break;
      const float p = Priority(line, current);
      priority_[line] = p;
      if (p == 0.0f) {
        first_unsent_[line] = 0;  // dropped from residual_ below
      } else if (first_unsent_[line] == 0) {
        first_unsent_[line] = version;
        residual_.push_back(static_cast<uint32_t>(line));
      }
    }
  });

  // Lines that would lag too long go now; the others compete for the budget.
  ManagedChoice choice;
  candidates_.clear();
  size_t kept = 0;
  for (const uint32_t line : residual_) {
    const uint64_t first = first_unsent_[line];
    if (first == 0) continue;
    if (first + params_.max_line_age <= version) {
      send->AddLines(line, 1);
      MarkSent(line, current);
      ++choice.due_lines;
      continue;
    }
    residual_[kept++] = line;
    candidates_.push_back({priority_[line], line});
  }
  residual_.resize(kept);

  const size_t budget_lines = budget_bytes / kLineBytes;
  if (choice.due_lines > budget_lines) {
    choice.over_budget = (choice.due_lines - budget_lines) * kLineBytes;
  }
  const size_t room = budget_lines > choice.due_lines ? budget_lines - choice.due_lines : 0;
  const size_t take = std::min(room, candidates_.size());
  if (take > 0) {
    // Highest priority first; equal priorities by line, so a run repeats.
    auto before = [](const Candidate& a, const Candidate& b) {
      return a.priority > b.priority || (a.priority == b.priority && a.line < b.line);
    };
    if (take < candidates_.size()) {
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(take),
                       candidates_.end(), before);
    }
    for (size_t i = 0; i < take; ++i) {
      send->AddLines(candidates_[i].line, 1);
      MarkSent(candidates_[i].line, current);
    }
    kept = 0;
    for (const uint32_t line : residual_) {
      if (first_unsent_[line] != 0) residual_[kept++] = line;
    }
    residual_.resize(kept);
  }
  choice.lines = choice.due_lines + take;
  choice.residual = residual_.size();
  return choice;
}

void ManagedSelection::Reset(const uint8_t* current) {
  std::memcpy(sent_.data(), current, sent_.size());
  for (const uint32_t line : residual_) {
    first_unsent_[line] = 0;
    priority_[line] = 0.0f;
  }
  residual_.clear();
}

uint64_t ManagedSelection::OldestLag(uint64_t version) const {
  uint64_t oldest = 0;
  for (const uint32_t line : residual_) {
    const uint64_t first = first_unsent_[line];
    if (first != 0 && (oldest == 0 || first < oldest)) oldest = first;
  }
  return oldest == 0 || oldest > version ? 0 : version - oldest + 1;
}

}  // namespace dsm
