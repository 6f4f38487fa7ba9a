// When a writer that publishes at a steady pace will post its next staged
// version, so that dsmd is awake and looking for it then. A writer that
// finds dsmd awake does not ring the doorbell: the ring wakes dsmd's core,
// which on this machine costs the writer's publish about 31 us (an eventfd
// write to a sleeping process), against a gather of 1% of a 64 MiB area's
// lines of about 50 us. This is the hybrid polling of Linux's block layer:
// sleep for most of the expected wait, then poll.
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
  // The window for the next post, or none while the writer's pace is
  // unknown, too uneven for a short window, or too slow to be worth one.
  std::optional<PostWindow> Next() const;
  // dsmd looked through the window and nothing came: no window until the next post.
  void Missed() { missed_ = true; }

 private:
  static constexpr uint32_t kGaps = 8;  // the gaps the forecast looks back on

  uint64_t last_ns_ = 0;
  uint64_t gaps_ns_[kGaps] = {};  // ring, newest at (count_ - 1) % kGaps
  uint32_t count_ = 0;            // gaps since the pace last changed
  uint64_t sum_ns_ = 0;           // of the gaps in the ring
  bool missed_ = false;
};

}  // namespace dsm

#endif  // DSM_DAEMON_POST_FORECAST_H_
