#include "net/fault_injector.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace dsm::net {

std::unique_ptr<Transport> WithFaults(std::unique_ptr<Transport> inner, const FaultConfig& faults) {
  return std::make_unique<FaultInjector>(std::move(inner), faults);
}

FaultInjector::FaultInjector(std::unique_ptr<Transport> inner, const FaultConfig& faults)
    : inner_(std::move(inner)), faults_(faults), rng_(faults.seed) {
  auto clamp = [](double p) { return std::clamp(p, 0.0, 1.0); };
  faults_.drop = clamp(faults_.drop);
  faults_.duplicate = clamp(faults_.duplicate);
  faults_.reorder = clamp(faults_.reorder);
  faults_.corrupt = clamp(faults_.corrupt);
  const double sum = faults_.drop + faults_.duplicate + faults_.reorder + faults_.corrupt;
  if (sum > 1.0) {
    faults_.drop /= sum;
    faults_.duplicate /= sum;
    faults_.reorder /= sum;
    faults_.corrupt /= sum;
  }
  drop_only_ = faults_.drop > 0 && faults_.duplicate == 0 && faults_.reorder == 0 &&
               faults_.corrupt == 0;
  staged_.resize(inner_->max_payload_bytes());
}

uint8_t* FaultInjector::Reserve(Destination dest) {
  staged_dest_ = dest;
  reserved_ = true;
  return drop_only_ ? inner_->Reserve(dest) : staged_.data();
}

bool FaultInjector::DrawDrop() {
  if (uniform_(rng_) >= faults_.drop) return false;
  ++faults_stats_.faults_dropped;
  return true;  // not committed: the inner transport's next Reserve abandons it
}

std::unique_ptr<TailHold> FaultInjector::NewTailHold() {
  return drop_only_ ? inner_->NewTailHold() : nullptr;
}

void FaultInjector::CommitWithTail(uint8_t* reserved, size_t head_bytes,
                                   std::span<const uint8_t> tail, TailHold* hold) {
  if (!drop_only_) return Transport::CommitWithTail(reserved, head_bytes, tail, hold);
  if (!reserved_) return;
  reserved_ = false;
  if (!DrawDrop()) inner_->CommitWithTail(reserved, head_bytes, tail, hold);
}

size_t FaultInjector::DropTails(TailHold* hold) {
  return drop_only_ ? inner_->DropTails(hold) : 0;
}

void FaultInjector::Commit(size_t payload_bytes) {
  if (!reserved_) return;
  reserved_ = false;
  if (drop_only_) {
    if (!DrawDrop()) inner_->Commit(payload_bytes);
    return;
  }
  // Oversized payloads go through unchanged so the inner transport drops and counts them.
  const size_t bytes = payload_bytes;
  const size_t staged_bytes = std::min(payload_bytes, staged_.size());
  const double r = uniform_(rng_);
  double edge = faults_.drop;
  if (r < edge) {
    ++faults_stats_.faults_dropped;
    return;
  }
  if (r < (edge += faults_.duplicate)) {
    ++faults_stats_.faults_duplicated;
    Send(staged_dest_, staged_.data(), bytes);
    Send(staged_dest_, staged_.data(), bytes);
  } else if (r < (edge += faults_.reorder)) {
    held_.push_back(
        {staged_dest_, std::vector<uint8_t>(staged_.begin(), staged_.begin() + staged_bytes)});
    return;
  } else if (r < (edge += faults_.corrupt) && staged_bytes > 0) {
    ++faults_stats_.faults_corrupted;
    std::uniform_int_distribution<size_t> pick(0, staged_bytes - 1);
    std::uniform_int_distribution<int> bit(0, 7);
    const size_t at = pick(rng_);
    staged_[at] = static_cast<uint8_t>(staged_[at] ^ (1u << bit(rng_)));
    Send(staged_dest_, staged_.data(), bytes);
  } else {
    Send(staged_dest_, staged_.data(), bytes);
  }
  ReleaseHeld();
}

void FaultInjector::ReleaseHeld() {
  for (const Frame& f : held_) {
    ++faults_stats_.faults_reordered;
    Send(f.dest, f.payload.data(), f.payload.size());
  }
  held_.clear();
}

void FaultInjector::Send(const Destination& dest, const uint8_t* payload, size_t bytes) {
  uint8_t* out = inner_->Reserve(dest);
  if (out == nullptr) return;  // counted by the inner transport
  std::memcpy(out, payload, std::min(bytes, inner_->max_payload_bytes()));
  inner_->Commit(bytes);
}

TransportStats FaultInjector::stats() const {
  TransportStats s = inner_->stats();
  s.faults_dropped += faults_stats_.faults_dropped;
  s.faults_duplicated += faults_stats_.faults_duplicated;
  s.faults_reordered += faults_stats_.faults_reordered;
  s.faults_corrupted += faults_stats_.faults_corrupted;
  return s;
}

}  // namespace dsm::net
