#include "daemon/key_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

namespace dsm {

namespace {

bool ParseHex(const std::string& text, std::array<uint8_t, wire::kKeyBytes>* out) {
  if (text.size() != 2 * wire::kKeyBytes) return false;
  for (size_t i = 0; i < wire::kKeyBytes; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = text[2 * i + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

}  // namespace

std::optional<std::vector<wire::FrameKey>> LoadKeyFile(const std::string& path, std::string* error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *error = fmt::format("key file {}: cannot read it", path);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = fmt::format("key file {}: not a regular file", path);
    return std::nullopt;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    *error = fmt::format("key file {}: others may read it (owner uid {}, mode {:o}); make it "
                         "dsmd's user's alone: chown {} {} && chmod 600 {}",
                         path, st.st_uid, st.st_mode & 0777, geteuid(), path, path);
    return std::nullopt;
  }
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    *error = path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description());
    return std::nullopt;
  }
  const toml::array* list = doc["key"].as_array();
  if (!list || list->empty()) {
    *error = fmt::format("key file {}: no [[key]] entries", path);
    return std::nullopt;
  }
  if (list->size() > wire::kMaxKeys) {
    *error = fmt::format("key file {}: {} keys, at most {} (two during a change-over)", path,
                         list->size(), wire::kMaxKeys);
    return std::nullopt;
  }
  std::vector<wire::FrameKey> keys;
  for (const toml::node& node : *list) {
    const int line = static_cast<int>(node.source().begin.line);
    const toml::table* t = node.as_table();
    const auto id = t ? (*t)["id"].value<int64_t>() : std::nullopt;
    const auto secret = t ? (*t)["secret"].value<std::string>() : std::nullopt;
    wire::FrameKey k;
    if (!id || *id < 1 || *id > 255) {
      *error = fmt::format("{}:{}: [[key]] needs an id from 1 to 255", path, line);
      return std::nullopt;
    }
    k.id = static_cast<uint8_t>(*id);
    if (!secret || !ParseHex(*secret, &k.secret)) {
      *error = fmt::format("{}:{}: [[key]] needs a secret of {} hex digits (for example from "
                           "`openssl rand -hex {}`)",
                           path, line, 2 * wire::kKeyBytes, wire::kKeyBytes);
      return std::nullopt;
    }
    for (const wire::FrameKey& other : keys) {
      if (other.id == k.id) {
        *error = fmt::format("{}:{}: key id {} is listed twice", path, line, *id);
        return std::nullopt;
      }
    }
    keys.push_back(k);
  }
  return keys;
}

bool FileChangeWatch::Changed() {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) st = {};
  const bool changed = st.st_ino != ino_ || st.st_size != size_ || st.st_mtim.tv_sec != mtime_s_ ||
                       st.st_mtim.tv_nsec != mtime_ns_;
  ino_ = st.st_ino;
  size_ = st.st_size;
  mtime_s_ = st.st_mtim.tv_sec;
  mtime_ns_ = st.st_mtim.tv_nsec;
  return changed;
}

}  // namespace dsm
