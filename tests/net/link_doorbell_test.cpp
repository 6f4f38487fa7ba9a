// LinkDoorbell: Unix datagram sockets in a temporary directory, no DPDK.
#include "net/link_doorbell.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace dsm::net {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class LinkDoorbellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsm-doorbell-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { rmdir(dir_.c_str()); }
  std::unique_ptr<LinkDoorbell> Open(uint16_t host) {
    std::string error;
    auto d = LinkDoorbell::Open(dir_, host, &error);
    EXPECT_NE(d, nullptr) << error;
    return d;
  }
  std::string dir_;
};

TEST_F(LinkDoorbellTest, ARingMakesThePeerReadableUntilItDrains) {
  auto a = Open(1);
  auto b = Open(2);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(Readable(b->fd(), 0));
  a->Ring(2);
  EXPECT_TRUE(Readable(b->fd(), 1000));
  EXPECT_FALSE(Readable(a->fd(), 0)) << "the ringer woke itself";
  b->Drain();
  EXPECT_FALSE(Readable(b->fd(), 0)) << "readable after draining";
  // More rings than one batch of the drain, and than the socket queues.
  for (int i = 0; i < 2000; ++i) a->Ring(2);
  EXPECT_TRUE(Readable(b->fd(), 1000));
  b->Drain();
  EXPECT_FALSE(Readable(b->fd(), 0));
}

TEST_F(LinkDoorbellTest, RingingAPeerThatIsNotListeningNeitherBlocksNorFails) {
  auto a = Open(1);
  ASSERT_TRUE(a);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) a->Ring(9);  // no such socket
  auto b = Open(9);
  ASSERT_TRUE(b);
  for (int i = 0; i < 100; ++i) a->Ring(9);  // now there is
  EXPECT_TRUE(Readable(b->fd(), 1000));
  b.reset();  // gone again
  a->Ring(9);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(LinkDoorbellTest, AStaleSocketIsReplacedAndTheSocketGoesWithTheDoorbell) {
  const std::string path = LinkDoorbell::PathFor(dir_, 3);
  {
    // Left by a daemon that died: bound, never removed.
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);
  }
  ASSERT_TRUE(Exists(path));
  auto d = Open(3);
  ASSERT_TRUE(d);
  auto ringer = Open(4);
  ringer->Ring(3);
  EXPECT_TRUE(Readable(d->fd(), 1000));
  d.reset();
  EXPECT_FALSE(Exists(path));
}

TEST(LinkDoorbellErrorTest, APathTooLongForASocketIsRefusedWithTheReason) {
  std::string error;
  EXPECT_EQ(LinkDoorbell::Open("/tmp/" + std::string(120, 'x'), 1, &error), nullptr);
  EXPECT_NE(error.find("too long"), std::string::npos) << error;
}

}  // namespace
}  // namespace dsm::net
