// MarkChangedLines: only lines whose bytes differ are marked, at any offset and
// length, including a partial last line, and nothing past the area is read.
#include "coherence/line_diff.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace dsm {
namespace {

std::vector<size_t> Marked(const ChangeLog& log) {
  std::vector<size_t> lines;
  for (size_t l = 0; l < log.lines(); ++l) {
    if (log.Test(l)) lines.push_back(l);
  }
  return lines;
}

TEST(LineDiff, EqualBytesMarkNothing) {
  std::vector<uint8_t> a(64 * 1024, 7), b(64 * 1024, 7);
  ChangeLog log(a.size());
  EXPECT_EQ(MarkChangedLines(a.data(), b.data(), 0, a.size(), &log), 0u);
  EXPECT_TRUE(log.Empty());
}

TEST(LineDiff, MarksExactlyTheLinesThatDiffer) {
  std::vector<uint8_t> a(16 * 4096), b(16 * 4096);
  a[0] = 1;              // line 0, first byte
  a[64 * 3 + 63] = 1;    // line 3, last byte
  a[4096 * 5 + 100] = 9; // line 321
  ChangeLog log(a.size());
  EXPECT_EQ(MarkChangedLines(a.data(), b.data(), 0, a.size(), &log), 3u);
  EXPECT_EQ(Marked(log), (std::vector<size_t>{0, 3, 321}));
}

TEST(LineDiff, ComparesOnlyTheGivenRange) {
  std::vector<uint8_t> a(8 * 4096), b(8 * 4096);
  a[10] = 1;          // page 0: outside the range
  a[4096 + 70] = 1;   // page 1, line 65
  ChangeLog log(a.size());
  EXPECT_EQ(MarkChangedLines(a.data(), b.data(), 4096, 4096, &log), 1u);
  EXPECT_EQ(Marked(log), (std::vector<size_t>{65}));
}

TEST(LineDiff, PartialLastLineIsComparedWithinTheArea) {
  // An area of 100 bytes: line 1 holds bytes 64..99 only. The buffers are
  // exactly that long, so reading past byte 99 would be caught by ASan/valgrind;
  // and a difference there must be found.
  std::vector<uint8_t> a(100), b(100);
  a[99] = 5;
  ChangeLog log(100);
  EXPECT_EQ(MarkChangedLines(a.data(), b.data(), 0, 4096, &log), 1u);
  EXPECT_EQ(Marked(log), (std::vector<size_t>{1}));
  ChangeLog past(100);
  EXPECT_EQ(MarkChangedLines(a.data(), b.data(), 100, 64, &past), 0u);
  EXPECT_TRUE(past.Empty());
}

TEST(LineDiff, RandomChangesAreFoundExactly) {
  std::mt19937_64 rng(42);
  const size_t bytes = 256 * 4096 + 40;
  std::vector<uint8_t> a(bytes), b(bytes);
  for (auto& x : a) x = static_cast<uint8_t>(rng());
  b = a;
  std::vector<bool> expect((bytes + 63) / 64);
  for (int i = 0; i < 500; ++i) {
    const size_t at = rng() % bytes;
    b[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    expect[at / 64] = true;
  }
  ChangeLog log(bytes);
  size_t want = 0;
  for (bool e : expect) want += e;
  EXPECT_EQ(MarkChangedLines(b.data(), a.data(), 0, bytes, &log), want);
  for (size_t l = 0; l < expect.size(); ++l) EXPECT_EQ(log.Test(l), expect[l]) << "line " << l;
}

}  // namespace
}  // namespace dsm
