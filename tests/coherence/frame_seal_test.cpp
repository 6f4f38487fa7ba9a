// Frames sealed with the cluster's keys: the tag is AES-256-GMAC (checked
// against OpenSSL), a frame verifies only with the key that made it, every
// changed bit is caught before the payload is read, keys rotate with two held
// at once, and DATA frames framed with a key carry the same lines.
#include "coherence/frame_seal.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstring>
#include <vector>

#include "coherence/line_set.h"
#include "coherence/wire_format.h"

namespace dsm::wire {
namespace {

using Bytes = std::vector<uint8_t>;

FrameKey Key(uint8_t id, uint8_t fill) {
  FrameKey k;
  k.id = id;
  for (size_t i = 0; i < kKeyBytes; ++i) k.secret[i] = static_cast<uint8_t>(fill + i * 7);
  return k;
}

void Use(FrameSeal& seal, std::initializer_list<FrameKey> keys) {
  ASSERT_TRUE(seal.SetKeys(std::vector<FrameKey>(keys)));
}

// A heartbeat of `seal`'s layout, sealed by it.
Bytes Heartbeat(FrameSeal& seal, uint16_t source = 3, uint32_t incarnation = 0x1234abcd) {
  Header h{};
  h.magic = kMagic;
  h.protocol_version = kProtocolVersion;
  h.type = static_cast<uint8_t>(FrameType::kHeartbeat);
  h.source_host = source;
  h.dest_host = kAllHosts;
  h.incarnation = incarnation;
  HeartbeatBody body{};
  body.sent_ns = 987654321;
  body.region_used_bytes = 4096;
  body.region_bytes = 1 << 20;
  Bytes f(seal.header_bytes() + sizeof(body));
  std::memcpy(f.data(), &h, sizeof(h));
  std::memcpy(f.data() + seal.header_bytes(), &body, sizeof(body));
  seal.Seal(f.data(), sizeof(body));
  return f;
}

DropReason DecodeWith(const FrameSeal& seal, const Bytes& f, Frame* out = nullptr) {
  Frame scratch;
  return Decode(f, seal, out ? out : &scratch);
}

TEST(FrameSeal, AKeyedFrameVerifiesWithItsKeyAndCarriesItsPayload) {
  FrameSeal sender, receiver;
  Use(sender, {Key(5, 1)});
  Use(receiver, {Key(5, 1)});
  EXPECT_EQ(sender.header_bytes(), sizeof(Header) + kTagBytes);
  const Bytes f = Heartbeat(sender);
  Frame out;
  ASSERT_EQ(DecodeWith(receiver, f, &out), DropReason::kNone);
  EXPECT_TRUE(out.header.flags & kFlagAuthenticated);
  EXPECT_EQ((out.header.flags & kKeyIdMask) >> kKeyIdShift, 5);
  ASSERT_EQ(out.body.size(), sizeof(HeartbeatBody));
  HeartbeatBody body;
  std::memcpy(&body, out.body.data(), sizeof(body));
  EXPECT_EQ(body.sent_ns, 987654321u);
}

TEST(FrameSeal, TheTagIsAes256GmacOverHeaderAndPayloadAsOpenSslComputesIt) {
  FrameSeal seal;
  const FrameKey key = Key(7, 40);
  Use(seal, {key});
  const Bytes f = Heartbeat(seal, 2, 0xdeadbeef);
  Header h;
  std::memcpy(&h, f.data(), sizeof(h));
  unsigned char nonce[12];
  std::memcpy(nonce, &h.incarnation, 4);
  std::memcpy(nonce + 4, &h.checksum, 8);
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  ASSERT_EQ(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, nullptr, nullptr), 1);
  ASSERT_EQ(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr), 1);
  ASSERT_EQ(EVP_EncryptInit_ex(c, nullptr, nullptr, key.secret.data(), nonce), 1);
  int n = 0;
  ASSERT_EQ(EVP_EncryptUpdate(c, nullptr, &n, f.data(), sizeof(Header)), 1);
  ASSERT_EQ(EVP_EncryptUpdate(c, nullptr, &n, f.data() + seal.header_bytes(),
                              static_cast<int>(f.size() - seal.header_bytes())),
            1);
  unsigned char tag[16];
  ASSERT_EQ(EVP_EncryptFinal_ex(c, tag, &n), 1);
  ASSERT_EQ(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag), 1);
  EVP_CIPHER_CTX_free(c);
  EXPECT_EQ(std::memcmp(tag, f.data() + sizeof(Header), kTagBytes), 0);
}

TEST(FrameSeal, EveryChangedBitIsCaughtBeforeThePayloadIsRead) {
  FrameSeal seal;
  Use(seal, {Key(1, 9)});
  const Bytes f = Heartbeat(seal);
  const size_t flags_bits = offsetof(Header, flags) * 8;
  for (size_t bit = 0; bit < f.size() * 8; ++bit) {
    Bytes g = f;
    g[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const DropReason r = DecodeWith(seal, g);
    EXPECT_NE(r, DropReason::kNone) << "bit " << bit;
    // Header fields checked before the seal (magic, version, lengths, type,
    // the flag that says a tag follows) give their own reasons; every other
    // change is unauthenticated, or names a key this side does not hold.
    const bool key_id_bit = bit >= flags_bits + kKeyIdShift && bit < flags_bits + 16;
    if (key_id_bit) {
      EXPECT_EQ(r, DropReason::kUnknownKey) << "bit " << bit;
    }
  }
}

TEST(FrameSeal, AWrongKeyAnUnknownKeyAndAMissingTagAreEachDroppedAsSuch) {
  FrameSeal receiver;
  Use(receiver, {Key(3, 1)});
  FrameSeal same_id_other_secret, other_id, none;
  Use(same_id_other_secret, {Key(3, 2)});
  Use(other_id, {Key(4, 1)});
  EXPECT_EQ(DecodeWith(receiver, Heartbeat(same_id_other_secret)), DropReason::kUnauthenticated);
  EXPECT_EQ(DecodeWith(receiver, Heartbeat(other_id)), DropReason::kUnknownKey);
  EXPECT_EQ(DecodeWith(receiver, Heartbeat(none)), DropReason::kUnauthenticated);
  // A host without keys does not take a keyed cluster's frames either.
  EXPECT_EQ(DecodeWith(none, Heartbeat(other_id)), DropReason::kUnauthenticated);
  EXPECT_EQ(DecodeWith(none, Heartbeat(none)), DropReason::kNone);
}

TEST(FrameSeal, KeysRotateWithTheOldAndTheNewHeldAtOnce) {
  FrameSeal a, b;
  Use(a, {Key(1, 1)});
  Use(b, {Key(1, 1)});
  // The new key is added second everywhere: still signed with the old one.
  Use(a, {Key(1, 1), Key(2, 50)});
  Use(b, {Key(1, 1), Key(2, 50)});
  EXPECT_EQ(a.signing_key_id(), 1);
  EXPECT_EQ(DecodeWith(b, Heartbeat(a)), DropReason::kNone);
  // a moves to the new key first; b, not yet, takes both.
  Use(a, {Key(2, 50), Key(1, 1)});
  EXPECT_EQ(a.signing_key_id(), 2);
  EXPECT_EQ(DecodeWith(b, Heartbeat(a)), DropReason::kNone);
  EXPECT_EQ(DecodeWith(a, Heartbeat(b)), DropReason::kNone);
  // The old key dropped: what it signs is refused.
  Use(a, {Key(2, 50)});
  Use(b, {Key(2, 50)});
  FrameSeal old;
  Use(old, {Key(1, 1)});
  EXPECT_EQ(DecodeWith(a, Heartbeat(b)), DropReason::kNone);
  EXPECT_EQ(DecodeWith(a, Heartbeat(old)), DropReason::kUnknownKey);
}

TEST(FrameSeal, EveryFrameGetsItsOwnNonceWithTheSendersHostOnTop) {
  FrameSeal seal;
  Use(seal, {Key(1, 1)});
  Header first, second;
  const Bytes f1 = Heartbeat(seal, 6);
  const Bytes f2 = Heartbeat(seal, 6);
  std::memcpy(&first, f1.data(), sizeof(Header));
  std::memcpy(&second, f2.data(), sizeof(Header));
  EXPECT_NE(first.checksum, second.checksum);
  EXPECT_EQ(first.checksum >> 48, 6u);
  EXPECT_EQ(second.checksum >> 48, 6u);
  EXPECT_NE(std::memcmp(f1.data() + sizeof(Header), f2.data() + sizeof(Header), kTagBytes), 0);
}

TEST(FrameSeal, KeySetsWithoutIdsOrWithRepeatsOrTooManyAreRefused) {
  FrameSeal seal;
  EXPECT_FALSE(seal.SetKeys(std::vector<FrameKey>{Key(0, 1)}));
  EXPECT_FALSE(seal.SetKeys(std::vector<FrameKey>{Key(2, 1), Key(2, 3)}));
  std::vector<FrameKey> many;
  for (uint8_t i = 1; i <= kMaxKeys + 1; ++i) many.push_back(Key(i, i));
  EXPECT_FALSE(seal.SetKeys(many));
  EXPECT_FALSE(seal.keyed()) << "a refused set changes nothing";
  EXPECT_TRUE(seal.SetKeys(std::vector<FrameKey>{Key(2, 1)}));
  EXPECT_TRUE(seal.SetKeys({}));
  EXPECT_FALSE(seal.keyed());
}

// Collects frames; with TailSink's CommitWithTail too (the lines sent from
// where they are), as the daemon's device does.
struct TailCollector {
  std::vector<Bytes> frames;
  Bytes buffer;
  size_t tails = 0;
  uint8_t* Reserve(size_t bytes) {
    buffer.assign(bytes, 0);
    return buffer.data();
  }
  void Commit(size_t bytes) { frames.emplace_back(buffer.begin(), buffer.begin() + bytes); }
  void CommitWithTail(size_t bytes, std::span<const uint8_t> tail) {
    Bytes f(buffer.begin(), buffer.begin() + bytes);
    f.insert(f.end(), tail.begin(), tail.end());
    frames.push_back(std::move(f));
    ++tails;
  }
};

TEST(FrameSeal, DataFramesFramedWithAKeyCarryTheSameLinesWithinTheFrameSize) {
  constexpr size_t kLines = 2048;
  constexpr size_t kMaxFrame = 1472;
  Bytes content(kLines * kLineBytes);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i * 13 + 1);
  LineSet lines(kLines * kLineBytes);
  for (size_t l = 0; l < 1000; l += (l % 5 == 0 ? 1 : 3)) lines.AddLines(l, 1);
  lines.AddLines(1000, 900);  // long enough for frames of one run
  Header h{};
  h.source_host = 2;
  h.incarnation = 77;
  h.version = 9;
  FrameSeal seal;
  Use(seal, {Key(8, 3)});
  const DataFrameWriter writer(kMaxFrame, h, &seal);
  ASSERT_TRUE(writer.ok());
  TailCollector sink;
  const uint32_t written = writer.Write(lines, content.data(), sink);
  ASSERT_EQ(written, sink.frames.size());
  EXPECT_GT(sink.tails, 0u) << "frames of one run send their lines in place";
  LineSet got(kLines * kLineBytes);
  for (const Bytes& f : sink.frames) {
    EXPECT_LE(f.size(), kMaxFrame);
    Frame out;
    ASSERT_EQ(DecodeWith(seal, f, &out), DropReason::kNone);
    size_t at = 0;
    for (const wire::Run r : out.runs) {
      for (uint32_t l = r.first_line; l < r.first_line + r.line_count; ++l) {
        got.AddLines(l, 1);
        EXPECT_EQ(std::memcmp(out.line_data.data() + at, content.data() + l * kLineBytes, kLineBytes), 0);
        at += kLineBytes;
      }
    }
  }
  EXPECT_EQ(got.CountLines(), lines.CountLines());
  // Without the key, none of them is taken.
  FrameSeal none;
  for (const Bytes& f : sink.frames) EXPECT_EQ(DecodeWith(none, f), DropReason::kUnauthenticated);
}

}  // namespace
}  // namespace dsm::wire
