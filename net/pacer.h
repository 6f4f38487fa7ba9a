// A token bucket on bits per second, as virtual scheduling (GCRA): a frame may
// go when the bucket's theoretical arrival time is at most `burst_bits` worth
// of time ahead of now. Integer ticks of any clock (TSC cycles in the
// transport, nanoseconds of a fake clock in tests); nothing here sleeps.
#ifndef DSM_NET_PACER_H_
#define DSM_NET_PACER_H_

#include <cstdint>
#include <functional>

namespace dsm::net {

class Pacer {
 public:
  using Clock = std::function<uint64_t()>;  // now, in ticks

  // bits_per_sec 0: unpaced (every frame may go now).
  Pacer(uint64_t bits_per_sec, uint64_t ticks_per_sec, uint64_t burst_bits, Clock now);

  bool enabled() const { return bits_per_sec_ != 0; }

  // Ticks until a frame of `bits` conforms (0: it may go now).
  uint64_t DelayTicks(uint64_t bits) const;
  // Records a frame of `bits` sent now (whether or not it conformed).
  void Consume(uint64_t bits);
  // Consume if the frame conforms now; false (and nothing consumed) otherwise.
  bool TryConsume(uint64_t bits);

 private:
  uint64_t bits_per_sec_;
  uint64_t ticks_per_sec_;
  uint64_t burst_ticks_;
  Clock now_;
  uint64_t tat_ = 0;            // theoretical arrival time of the next frame
  uint64_t remainder_num_ = 0;  // sub-tick remainder of the costs, in bits*ticks_per_sec units
};

}  // namespace dsm::net

#endif  // DSM_NET_PACER_H_
