// The key file: keys parsed in order (the first signs), a file others may
// read refused with how to fix it, and every malformed key refused with the
// line; the cluster file names it relative to itself; a change is noticed.
#include "daemon/key_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "daemon/cluster_config.h"

namespace dsm {
namespace {

const std::string kSecretA(64, 'a');
const std::string kSecretB = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";

std::string Key(int id, const std::string& secret) {
  return "[[key]]\nid = " + std::to_string(id) + "\nsecret = \"" + secret + "\"\n";
}

class KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsm-keys-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/cluster.key";
  }
  void TearDown() override {
    unlink(path_.c_str());
    unlink((dir_ + "/cluster.toml").c_str());
    rmdir(dir_.c_str());
  }
  std::optional<std::vector<wire::FrameKey>> Load(const std::string& text, mode_t mode = 0600) {
    std::ofstream(path_) << text;
    chmod(path_.c_str(), mode);
    error_.clear();
    return LoadKeyFile(path_, &error_);
  }

  std::string dir_, path_, error_;
};

TEST_F(KeyFileTest, KeysComeInTheirOrderTheFirstSigning) {
  const auto keys = Load(Key(2, kSecretB) + Key(1, kSecretA));
  ASSERT_TRUE(keys) << error_;
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].id, 2);
  EXPECT_EQ((*keys)[0].secret[0], 0x00);
  EXPECT_EQ((*keys)[0].secret[1], 0x11);
  EXPECT_EQ((*keys)[0].secret[31], 0xff);
  EXPECT_EQ((*keys)[1].id, 1);
  EXPECT_EQ((*keys)[1].secret[5], 0xaa);
}

TEST_F(KeyFileTest, AFileOthersMayReadIsRefusedWithTheFix) {
  EXPECT_FALSE(Load(Key(1, kSecretA), 0644));
  EXPECT_NE(error_.find("chmod 600"), std::string::npos) << error_;
  EXPECT_FALSE(Load(Key(1, kSecretA), 0640));
  EXPECT_TRUE(Load(Key(1, kSecretA), 0400)) << error_;
}

TEST_F(KeyFileTest, MalformedKeysAreRefusedWithTheLine) {
  EXPECT_FALSE(Load(""));
  EXPECT_NE(error_.find("no [[key]]"), std::string::npos) << error_;
  EXPECT_FALSE(Load(Key(0, kSecretA)));
  EXPECT_NE(error_.find("id from 1 to 255"), std::string::npos) << error_;
  EXPECT_FALSE(Load(Key(256, kSecretA)));
  EXPECT_FALSE(Load(Key(1, kSecretA.substr(2))));
  EXPECT_NE(error_.find("64 hex digits"), std::string::npos) << error_;
  EXPECT_FALSE(Load(Key(1, std::string(63, 'a') + "g")));
  EXPECT_FALSE(Load(Key(3, kSecretA) + "\n" + Key(3, kSecretB)));
  EXPECT_NE(error_.find("listed twice"), std::string::npos) << error_;
  EXPECT_NE(error_.find(":5:"), std::string::npos) << "the line of the second key: " << error_;
  EXPECT_FALSE(Load(Key(1, kSecretA) + Key(2, kSecretA) + Key(3, kSecretA) + Key(4, kSecretA) +
                    Key(5, kSecretA)));
  EXPECT_FALSE(Load("[[key]\n"));
}

TEST_F(KeyFileTest, TheClusterFileNamesItRelativeToItself) {
  const std::string cluster = dir_ + "/cluster.toml";
  std::ofstream(cluster) << "[cluster]\nkey_file = \"cluster.key\"\n[[host]]\nid = 1\nmac = "
                            "\"02:00:c6:12:00:01\"\nip = \"198.18.0.1\"\ndevice = \"x\"\n";
  std::string error;
  const auto cfg = LoadClusterConfig(cluster, &error);
  ASSERT_TRUE(cfg) << error;
  EXPECT_EQ(cfg->key_file, path_);
}

TEST_F(KeyFileTest, AChangeToTheFileIsNoticedOnce) {
  ASSERT_TRUE(Load(Key(1, kSecretA)));
  FileChangeWatch watch(path_);
  EXPECT_FALSE(watch.Changed());
  // A rotation writes a new file and renames it over the old one.
  const std::string tmp = path_ + ".new";
  std::ofstream(tmp) << Key(1, kSecretA) << Key(2, kSecretB);
  chmod(tmp.c_str(), 0600);
  ASSERT_EQ(rename(tmp.c_str(), path_.c_str()), 0);
  EXPECT_TRUE(watch.Changed());
  EXPECT_FALSE(watch.Changed());
}

}  // namespace
}  // namespace dsm
