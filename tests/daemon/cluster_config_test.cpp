// The cluster file: hosts with one device, or with one point-to-point link per
// peer ([[host.link]], memif meshes); every mistake is refused with the file,
// the line and what is wrong.
#include "daemon/cluster_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace dsm {
namespace {

class ClusterConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsm-cluster-XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override { unlink(path_.c_str()); }

  std::optional<ClusterConfig> Load(const std::string& text) {
    std::ofstream(path_) << text;
    error_.clear();
    return LoadClusterConfig(path_, &error_);
  }
  static std::string Host(int id, const std::string& rest) {
    return "[[host]]\nid = " + std::to_string(id) + "\nmac = \"02:00:c6:12:00:0" +
           std::to_string(id) + "\"\nip = \"198.18.0." + std::to_string(id) + "\"\n" + rest;
  }
  static std::string Link(int peer, const std::string& device) {
    return "[[host.link]]\npeer = " + std::to_string(peer) + "\ndevice = \"" + device + "\"\n";
  }

  std::string path_;
  std::string error_;
};

TEST_F(ClusterConfigTest, HostsWithADeviceOrWithLinks) {
  const auto c = Load("[cluster]\nmtu = 9000\n" + Host(1, "device = \"net_af_packet0,iface=dsm0\"\n") +
                      Host(2, "") + Link(1, "net_memif0,role=client") + Link(3, "net_memif1,role=server") +
                      Host(3, "") + Link(2, "net_memif0,role=client"));
  ASSERT_TRUE(c) << error_;
  EXPECT_EQ(c->mtu_bytes, 9000u);
  ASSERT_EQ(c->hosts.size(), 3u);
  EXPECT_EQ(c->hosts[0].device, "net_af_packet0,iface=dsm0");
  EXPECT_TRUE(c->hosts[0].links.empty());
  ASSERT_EQ(c->hosts[1].links.size(), 2u);
  EXPECT_TRUE(c->hosts[1].device.empty());
  EXPECT_EQ(c->hosts[1].links[0].peer, 1);
  EXPECT_EQ(c->hosts[1].links[0].device, "net_memif0,role=client");
  EXPECT_EQ(c->hosts[1].links[1].peer, 3);
  ASSERT_EQ(c->hosts[2].links.size(), 1u);
  EXPECT_EQ(c->hosts[2].links[0].peer, 2);
}

TEST_F(ClusterConfigTest, EveryMistakeIsRefusedWithTheFileAndWhatIsWrong) {
  struct Case {
    const char* what;
    std::string text;
    const char* says;
  };
  const std::string one = Host(1, "device = \"net_null0\"\n");
  const Case cases[] = {
      {"no device and no link", one + Host(2, ""), "needs either a device"},
      {"a device and links", one + Host(2, "device = \"x\"\n") + Link(1, "y"), "needs either a device"},
      {"a link to itself", one + Host(2, "") + Link(2, "x"), "(itself)"},
      {"a link to a host not in the file", one + Host(2, "") + Link(9, "x"), "(not in the file)"},
      {"two links to one host", one + Host(2, "") + Link(1, "x") + Link(1, "y"), "(twice)"},
      {"a link without a device", one + Host(2, "") + "[[host.link]]\npeer = 1\n", "needs a peer"},
      {"a link without a peer", one + Host(2, "") + "[[host.link]]\ndevice = \"x\"\n", "needs a peer"},
      {"an id twice", one + Host(1, "device = \"x\"\n"), "appears twice"},
      {"a multicast MAC", "[[host]]\nid = 1\nmac = \"01:00:5e:00:00:01\"\nip = \"198.18.0.1\"\ndevice = \"x\"\n",
       "unicast mac"},
      {"no hosts", "[cluster]\nmtu = 1500\n", "no [[host]]"},
      {"not TOML", "[[host]\n", path_.c_str()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_FALSE(Load(c.text));
    EXPECT_NE(error_.find(path_), std::string::npos) << error_;
    EXPECT_NE(error_.find(c.says), std::string::npos) << error_;
  }
}

}  // namespace
}  // namespace dsm
