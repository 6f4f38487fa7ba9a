// Reading the Fashion-MNIST data set as Debian's dataset-fashion-mnist installs it:
// gzipped IDX files (big-endian header, then raw unsigned bytes), read with zlib.
#ifndef EXAMPLES_FASHION_MNIST_IDX_H_
#define EXAMPLES_FASHION_MNIST_IDX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fmnist {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// One split: n images of rows x cols pixels (0..255, row-major), n labels 0..9.
struct Split {
  size_t n = 0;
  size_t rows = 0;
  size_t cols = 0;
  std::vector<uint8_t> pixels;  // n * rows * cols
  std::vector<uint8_t> labels;  // n
  size_t dim() const { return rows * cols; }
};

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `<dir>/<prefix>-labels-idx1-ubyte.gz`
// (prefix "train" or "t10k"). On failure returns false and says why (and how to fix
// it) in *error.
bool LoadSplit(const std::string& dir, const std::string& prefix, Split* out, std::string* error);

// The raw IDX parsing, separate from the file reading so it can be tested on bytes.
// `expected_dims` is 3 for images, 1 for labels; `dims` receives the sizes and
// `data` the payload.
bool ParseIdx(const std::vector<uint8_t>& bytes, int expected_dims, std::vector<size_t>* dims,
              std::vector<uint8_t>* data, std::string* error);

// Whole content of a gzip file (or a plain file: zlib reads both).
bool ReadGzipFile(const std::string& path, std::vector<uint8_t>* out, std::string* error);

}  // namespace fmnist

#endif  // EXAMPLES_FASHION_MNIST_IDX_H_
