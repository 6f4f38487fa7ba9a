// CopyLines / CopyLinesStreaming: byte-exact whatever the alignment (a plain
// copy where the destination is not 16-byte aligned) and the run's length.
#include "coherence/line_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "coherence/constants.h"

namespace dsm {
namespace {

TEST(LineCopyTest, CopiesExactlyTheLinesAskedForAtAnyAlignment) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> src(24 * kLineBytes + 64);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  // 1 and 3 lines: memcpy; 20 lines: streaming stores (kStreamingMinBytes).
  for (size_t lines : {1, 3, 20}) {
    for (size_t src_off : {0, 1, 8, 16, 63}) {
      for (size_t dst_off : {0, 8, 16, 64}) {  // 8: not 16-byte aligned, the memcpy path
        SCOPED_TRACE(testing::Message() << lines << " lines, src +" << src_off << " dst +" << dst_off);
        alignas(64) uint8_t dst[24 * kLineBytes];
        std::fill(std::begin(dst), std::end(dst), 0xee);
        const size_t bytes = lines * kLineBytes;
        CopyLines(dst + dst_off, src.data() + src_off, bytes);
        StoreFence();
        for (size_t i = 0; i < sizeof(dst); ++i) {
          const bool inside = i >= dst_off && i < dst_off + bytes;
          ASSERT_EQ(dst[i], inside ? src[src_off + i - dst_off] : 0xee) << "byte " << i;
        }
      }
    }
  }
}

TEST(LineCopyTest, NothingToCopyWritesNothing) {
  alignas(64) uint8_t dst[kLineBytes];
  std::fill(std::begin(dst), std::end(dst), 0x11);
  const uint8_t src[kLineBytes] = {};
  CopyLinesStreaming(dst, src, 0);
  StoreFence();
  for (uint8_t b : dst) EXPECT_EQ(b, 0x11);
}

}  // namespace
}  // namespace dsm
