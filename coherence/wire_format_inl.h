// Template members of DataFrameWriter. Included by wire_format.h only.
#ifndef DSM_COHERENCE_WIRE_FORMAT_INL_H_
#define DSM_COHERENCE_WIRE_FORMAT_INL_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace dsm::wire {

// Frames are built and parsed by memcpy of these structs: the host byte order
// must be the wire's (x86-64 and ARM64 Linux are little-endian).
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

template <typename ForEachRun, typename Fn>
void DataFrameWriter::PackRuns(ForEachRun&& for_each_run, Fn&& fn) const {
  if (!ok()) return;
  // Greedy: fill each frame with runs in address order; when the next run does
  // not fit, put as many of its lines as fit and carry the rest to the next frame.
  const size_t capacity = max_frame_bytes_ - header_bytes_;  // runs + line data
  std::vector<Run> runs;
  size_t used = 0;
  for_each_run([&](size_t first, size_t count) {
    while (count != 0) {
      if (capacity - used < sizeof(Run) + kLineBytes) {
        fn(std::span<const Run>(runs));
        runs.clear();
        used = 0;
      }
      const size_t take = std::min(count, (capacity - used - sizeof(Run)) / kLineBytes);
      runs.push_back(Run{static_cast<uint32_t>(first), static_cast<uint32_t>(take)});
      used += sizeof(Run) + take * kLineBytes;
      first += take;
      count -= take;
    }
  });
  if (!runs.empty()) fn(std::span<const Run>(runs));
}

template <typename RunList>
DataFrameWriter::Plan DataFrameWriter::MakePlanOfRuns(const RunList& runs) const {
  Plan plan;
  PackRuns(
      [&](auto&& run) {
        for (const auto& r : runs) run(size_t{r.first_line}, size_t{r.line_count});
      },
      [&](std::span<const Run> frame_runs) { AddToPlan(frame_runs, &plan); });
  EndPlan(&plan);
  return plan;
}

template <typename Sink>
uint32_t DataFrameWriter::Write(const LineSet& lines, const uint8_t* content, Sink& sink) const {
  return WriteRange(lines, content, 0, UINT32_MAX, sink);
}

template <typename Sink>
uint32_t DataFrameWriter::WriteRange(const LineSet& lines, const uint8_t* content,
                                     uint32_t first_seq, uint32_t count, Sink& sink) const {
  return WritePlanned(MakePlan(lines), content, first_seq, count, sink);
}

template <typename Sink>
uint32_t DataFrameWriter::WritePlanned(const Plan& plan, const uint8_t* content, uint32_t first_seq,
                                       uint32_t count, Sink& sink) const {
  const uint32_t frame_count = plan.frames();
  const uint64_t end_seq = std::min<uint64_t>(uint64_t{first_seq} + count, frame_count);
  uint32_t written = 0;
  for (uint64_t seq = first_seq; seq < end_seq; ++seq) {
    uint8_t* frame = sink.Reserve(max_frame_bytes_);
    if (frame == nullptr) break;
    const std::span<const Run> runs = plan.FrameRuns(seq);
    ++written;
    if constexpr (TailSink<Sink>) {
      if (runs.size() == 1) {
        // One run: its lines are one stretch of `content`, sent from there.
        const std::span<const uint8_t> tail(content + size_t{runs[0].first_line} * kLineBytes,
                                            size_t{runs[0].line_count} * kLineBytes);
        sink.CommitWithTail(FillHead(frame, runs, tail, static_cast<uint32_t>(seq), frame_count),
                            tail);
        continue;
      }
    }
    // The next frame's lines are scattered over the area: ask for them now,
    // so their misses overlap this frame's work instead of following it.
    if (seq + 1 < end_seq) {
      for (uint32_t r = plan.frame_start[seq + 1]; r < plan.frame_start[seq + 2]; ++r) {
        __builtin_prefetch(content + size_t{plan.runs[r].first_line} * kLineBytes, 0, 3);
      }
    }
    sink.Commit(FillFrame(frame, runs, content, static_cast<uint32_t>(seq), frame_count));
  }
  return written;
}

template <typename Sink>
uint32_t DataFrameWriter::WriteCompact(const Plan& plan, const uint8_t* compact, uint32_t first_seq,
                                       uint32_t count, Sink& sink) const {
  const uint32_t frame_count = plan.frames();
  const uint64_t end_seq = std::min<uint64_t>(uint64_t{first_seq} + count, frame_count);
  uint32_t written = 0;
  for (uint64_t seq = first_seq; seq < end_seq; ++seq) {
    uint8_t* frame = sink.Reserve(max_frame_bytes_);
    if (frame == nullptr) break;
    const std::span<const Run> runs = plan.FrameRuns(seq);
    const std::span<const uint8_t> tail(
        compact + size_t{plan.lines_before[seq]} * kLineBytes,
        size_t{plan.lines_before[seq + 1] - plan.lines_before[seq]} * kLineBytes);
    const size_t head = FillHead(frame, runs, tail, static_cast<uint32_t>(seq), frame_count);
    ++written;
    if constexpr (TailSink<Sink>) {
      sink.CommitWithTail(head, tail);
    } else {
      std::memcpy(frame + head, tail.data(), tail.size());
      sink.Commit(head + tail.size());
    }
  }
  return written;
}

}  // namespace dsm::wire

#endif  // DSM_COHERENCE_WIRE_FORMAT_INL_H_
