// When a writer that publishes at a steady pace will post its next staged
// version, so that dsmd is awake and looking for it then. A writer that
// finds dsmd awake does not ring the doorbell: the ring wakes dsmd's core,
// which on this machine costs the writer's publish about 31 us (an eventfd
// write to a sleeping process), against a gather of 1% of a 64 MiB area's
// lines of about 50 us. This is the hybrid polling of Linux's block layer:
// sleep for most of the expected wait, then poll.
//
// Two clocks can tell the next post: the gaps between posts (a writer with a
// steady step), and the delay from the moment every replica held the last
// version to the next post (a writer that waits for its readers, whose gaps
// vary with the transfer but whose own work between versions does not).
// The narrower window wins.
#ifndef DSM_DAEMON_POST_FORECAST_H_
#define DSM_DAEMON_POST_FORECAST_H_

#include <cstdint>
#include <optional>

namespace dsm {

// Where dsmd looks for the next post: it sleeps until `wake_ns` (a post
// before then rings the doorbell, as without a forecast) and then looks at
// every turn, without arming the doorbell, until `until_ns`.
struct PostWindow {
  uint64_t wake_ns;
  uint64_t until_ns;
};

class PostForecast {
 public:
  // A version posted at `posted_ns` (the writer's monotonic clock), once per version.
  void Posted(uint64_t posted_ns);
  // Every replica holds the last posted version, as of `now_ns` (dsmd's
  // monotonic clock, the writer's too). Only the first call after a post counts.
  void Delivered(uint64_t now_ns);
  // The window for the next post, or none while the writer's pace is
  // unknown, too uneven for a short window, or too slow to be worth one.
  std::optional<PostWindow> Next() const;
  // dsmd looked through the window and nothing came: no window until the next post.
  void Missed() { missed_ = true; }

 private:
  // The newest spans of one kind, since their length last changed pace.
  class Spans {
   public:
    // Starts over from `ns` if it is far from the others' mean (a pause, a
    // new phase) rather than average across the change.
    void Add(uint64_t ns);
    void Clear() { count_ = 0, sum_ns_ = 0; }
    uint32_t count() const { return count_; }
    uint64_t mean() const;
    // The half-width of a window around the mean: twice the spans' mean
    // deviation (about two standard deviations of a normal spread) and a
    // margin, at most `max_half`; none if that would have missed more than a
    // few of them.
    std::optional<uint64_t> Half(uint64_t max_half) const;

   private:
    static constexpr uint32_t kKept = 8;
    uint64_t ns_[kKept] = {};  // ring, newest at (count_ - 1) % kKept
    uint32_t count_ = 0;
    uint64_t sum_ns_ = 0;  // of the spans in the ring
  };

  Spans gaps_;                 // post to post
  Spans delays_;               // delivery to the next post
  uint64_t last_ns_ = 0;       // the last post
  uint64_t delivered_ns_ = 0;  // the first delivery since then (0: none)
  bool missed_ = false;
};

}  // namespace dsm

#endif  // DSM_DAEMON_POST_FORECAST_H_
