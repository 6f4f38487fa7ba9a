// Which changed lines of a managed area go out with a version, and which wait
// (managed communication, as in Bösen, under plain pointers). Within a byte
// budget, the lines whose float32 elements changed most (relative to, or in
// absolute terms from, what the readers last received) go first; the others
// stay in a residual and go later: with spare budget, or once they have
// lagged `max_line_age` versions, whatever the budget. A waiting line leaves
// the residual only when it is sent, even if its bytes go back to what
// sent() holds: frames may have carried newer bytes of it to some readers.
//
// Pure logic: the caller passes the area's bytes at each version and makes
// sure the lines chosen reach every reader (resends); what they carry then
// becomes what the readers have (sent()).
//
// Lag: a line that changed at version c and has not been sent since is wrong
// on the replicas from version c on; at version v it lags v - c + 1 versions.
// After Select(v, ...) no residual line lags more than max_line_age at v.
#ifndef DSM_COHERENCE_MANAGED_SELECTION_H_
#define DSM_COHERENCE_MANAGED_SELECTION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coherence/line_set.h"

namespace dsm {

// How a changed float32 element is ranked against what readers have.
enum class ManagedRank {
  kRelative,  // |new - old| / max(|old|, tiny): Bösen's relative magnitude
  kAbsolute,  // |new - old|: for values whose effect scales with the change itself
};

struct ManagedParams {
  // Versions a line may lag the writer on a replica; 0: every change goes
  // out with its own version.
  uint32_t max_line_age = 8;
  ManagedRank rank = ManagedRank::kRelative;
};

// What one selection chose.
struct ManagedChoice {
  size_t lines = 0;        // chosen, due or not
  size_t due_lines = 0;    // of those, chosen because of their lag
  size_t over_budget = 0;  // line bytes chosen beyond the budget (due lines only)
  size_t residual = 0;     // lines left waiting
};

class ManagedSelection {
 public:
  // `area_bytes`: the area's size. Readers start with an area of zeros, as
  // a new area is.
  ManagedSelection(size_t area_bytes, const ManagedParams& params);

  // Version `version` of the area is `current` (its bytes, whole lines),
  // and `changed` holds the lines written since the version before (empty
  // for a top-up of the same version: residual lines only, with the budget
  // left over). Chooses into `send` (cleared first) the lines that are due
  // by their lag, then the residual's highest priorities while
  // `budget_bytes` of lines last. Their bytes become what readers have.
  ManagedChoice Select(uint64_t version, const LineSet& changed, const uint8_t* current,
                       size_t budget_bytes, LineSet* send);

  // Readers now have `current` (a whole-area transfer): nothing waits.
  void Reset(const uint8_t* current);

  size_t residual_lines() const { return residual_count_; }
  // Line bytes waiting in the residual.
  size_t residual_bytes() const { return residual_count_ * kLineBytes; }
  // How many versions the oldest residual line lags at `version` (0: none).
  uint64_t OldestLag(uint64_t version) const;
  // What readers have once every chosen line arrived (whole lines).
  const uint8_t* sent() const { return sent_.data(); }
  // The priority of `line` as last computed (tests): 0 if it equals what
  // readers have.
  float priority(size_t line) const { return priority_[line]; }

 private:
  // How much line `line` of `current` differs from what readers have:
  // max over its float32 elements of their rank (|new - old| / max(|old|,
  // tiny), or |new - old|); infinite for a changed NaN or infinity, or
  // changed bytes past the last whole element of a partial line.
  float Priority(size_t line, const uint8_t* current) const;

  size_t area_bytes_;
  size_t lines_;
  ManagedParams params_;
  std::vector<uint8_t> sent_;
  // Per line, padded to whole pages (the page kernels read 64 at a time).
  std::vector<float> priority_;         // valid while it waits
  std::vector<uint64_t> first_unsent_;  // while it waits: its oldest unsent change's version
  std::vector<uint64_t> residual_;      // bit per line: it waits
  size_t residual_count_ = 0;
  struct Candidate {
    float priority;
    uint32_t line;
  };
  // Adds the `take` highest-priority candidates to `send` (equal ones: the
  // lower line first).
  void ChooseHighest(size_t take, LineSet* send);
  std::vector<uint64_t> candidates_;  // by Select, per page: waiting lines not due
  size_t candidate_count_ = 0;
  std::vector<uint32_t> histogram_;  // the candidates counted by their priority's top 16 bits
  std::vector<Candidate> boundary_;  // ChooseHighest's candidates of the boundary bucket
};

// Tests: rank with SSE2 even where AVX-512F is there (both must agree with
// the scalar definition). Returns whether AVX-512F was in use.
bool UseAvx512ManagedRanking(bool on);

}  // namespace dsm

#endif  // DSM_COHERENCE_MANAGED_SELECTION_H_
