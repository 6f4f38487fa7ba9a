#include "idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace fmnist {

namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

constexpr uint8_t kTypeUnsignedByte = 0x08;

}  // namespace

bool ReadGzipFile(const std::string& path, std::vector<uint8_t>* out, std::string* error) {
  out->clear();
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    *error = "cannot open " + path + ": " +
             (errno ? std::strerror(errno) : "out of memory") +
             " (the Fashion-MNIST files come with Debian's package dataset-fashion-mnist: "
             "apt-get install dataset-fashion-mnist, or point --data at a directory holding them)";
    return false;
  }
  gzbuffer(f, 1 << 20);
  constexpr size_t kChunk = 1 << 22;
  for (;;) {
    const size_t old = out->size();
    out->resize(old + kChunk);
    const int got = gzread(f, out->data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int zerr = 0;
      const char* msg = gzerror(f, &zerr);
      *error = "cannot read " + path + ": " + (msg ? msg : "zlib error") +
               " (is the file truncated or not gzip? reinstall dataset-fashion-mnist)";
      gzclose(f);
      out->clear();
      return false;
    }
    out->resize(old + static_cast<size_t>(got));
    if (static_cast<size_t>(got) < kChunk) break;
  }
  gzclose(f);
  return true;
}

bool ParseIdx(const std::vector<uint8_t>& bytes, int expected_dims, std::vector<size_t>* dims,
              std::vector<uint8_t>* data, std::string* error) {
  dims->clear();
  data->clear();
  if (bytes.size() < 4) {
    *error = "IDX data is " + std::to_string(bytes.size()) + " bytes, shorter than its header";
    return false;
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    *error = "not an IDX file (the first two bytes must be zero)";
    return false;
  }
  if (bytes[2] != kTypeUnsignedByte) {
    *error = "IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (8)";
    return false;
  }
  const int ndims = bytes[3];
  if (ndims != expected_dims) {
    *error = "IDX file has " + std::to_string(ndims) + " dimensions, expected " +
             std::to_string(expected_dims);
    return false;
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header) {
    *error = "IDX header is truncated";
    return false;
  }
  size_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    const size_t n = BigEndian32(bytes.data() + 4 + 4 * d);
    if (n != 0 && total > std::numeric_limits<size_t>::max() / n) {
      *error = "IDX dimensions overflow";
      return false;
    }
    total *= n;
    dims->push_back(n);
  }
  if (bytes.size() - header != total) {
    *error = "IDX payload is " + std::to_string(bytes.size() - header) + " bytes, the header says " +
             std::to_string(total) + " (truncated or corrupt file)";
    return false;
  }
  data->assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return true;
}

bool LoadSplit(const std::string& dir, const std::string& prefix, Split* out, std::string* error) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> raw;
  std::vector<size_t> dims;
  if (!ReadGzipFile(images_path, &raw, error)) return false;
  if (!ParseIdx(raw, 3, &dims, &out->pixels, error)) {
    *error = images_path + ": " + *error;
    return false;
  }
  out->n = dims[0];
  out->rows = dims[1];
  out->cols = dims[2];
  if (!ReadGzipFile(labels_path, &raw, error)) return false;
  if (!ParseIdx(raw, 1, &dims, &out->labels, error)) {
    *error = labels_path + ": " + *error;
    return false;
  }
  if (dims[0] != out->n) {
    *error = labels_path + " has " + std::to_string(dims[0]) + " labels but " + images_path +
             " has " + std::to_string(out->n) + " images";
    return false;
  }
  for (size_t i = 0; i < out->n; ++i) {
    if (out->labels[i] > 9) {
      *error = labels_path + ": label " + std::to_string(out->labels[i]) + " at index " +
               std::to_string(i) + " is not a class 0..9";
      return false;
    }
  }
  return true;
}

}  // namespace fmnist
