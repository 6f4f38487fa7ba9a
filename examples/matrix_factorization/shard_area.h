// The area each worker writes, "<prefix>/shard/<k>", and where things are in it.
//
//   Header     progress and the per-epoch error sums of this worker's users
//   shard rows the item factors of items [lo_k, hi_k): worker k is their only writer
//   push rows  one row per item: worker k's cumulative SGD update of that item, for
//              the items other workers own (absent with one worker)
//
// Rows are padded to whole 64-byte lines, so logging a row dirties exactly its
// lines and two rows never share one. The owner of an item adds what every other
// worker pushed for it since it last looked (the push rows are cumulative, so a
// version that never arrived is covered by the next one) and records up to which
// version of the pusher's area it did so.
#ifndef DSM_EXAMPLES_MATRIX_FACTORIZATION_SHARD_AREA_H_
#define DSM_EXAMPLES_MATRIX_FACTORIZATION_SHARD_AREA_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace mf {

constexpr size_t kLineBytes = 64;
constexpr int kMaxEpochs = 100;

// Sums over one worker's users after an epoch, so any worker can form the global RMSE.
struct EpochStats {
  double train_sse;
  double test_sse;
  uint64_t train_n;
  uint64_t test_n;
};

constexpr int kMaxWorkers = 64;

struct alignas(kLineBytes) ShardHeader {
  uint64_t step;         // training steps done; logged every step so each step is a version
  uint64_t phase;        // bumped by the epoch-end publishes (fold, evaluation, done)
  uint64_t epochs_done;  // epochs whose stats are filled in
  uint64_t pad[5];
  // The shard rows hold worker j's pushes up to j's version folded_version[j]:
  // j adds its later pushes to what it reads of this shard (it reads its own writes).
  uint64_t folded_version[kMaxWorkers];
  EpochStats epochs[kMaxEpochs];
};

// Item ids are split into `workers` contiguous shards.
class ShardLayout {
 public:
  ShardLayout(uint32_t items, int workers, uint32_t factors)
      : items_(items),
        workers_(workers),
        row_floats_((factors * sizeof(float) + kLineBytes - 1) / kLineBytes * kLineBytes /
                    sizeof(float)) {}

  size_t row_floats() const { return row_floats_; }
  size_t row_bytes() const { return row_floats_ * sizeof(float); }
  uint32_t lo(int w) const { return static_cast<uint32_t>(uint64_t{items_} * w / workers_); }
  uint32_t hi(int w) const { return lo(w + 1); }
  int owner(uint32_t item) const {
    // lo() rounds down, so the first guess is at most one shard too low.
    int w = static_cast<int>(uint64_t{item} * workers_ / items_);
    while (item >= hi(w)) ++w;
    return w;
  }
  size_t push_rows() const { return workers_ > 1 ? items_ : 0; }
  size_t bytes(int w) const {
    return sizeof(ShardHeader) + (hi(w) - lo(w) + push_rows()) * row_bytes();
  }

  static ShardHeader* header(void* base) { return static_cast<ShardHeader*>(base); }
  static const ShardHeader* header(const void* base) { return static_cast<const ShardHeader*>(base); }
  // Factors of `item`, which worker w owns, in w's area at `base`.
  template <typename T>
  T* shard_row(T* base, int w, uint32_t item) const {
    return Row(base, sizeof(ShardHeader), item - lo(w));
  }
  // Worker w's cumulative update of `item`, in w's area at `base`.
  template <typename T>
  T* push_row(T* base, int w, uint32_t item) const {
    return Row(base, sizeof(ShardHeader) + (hi(w) - lo(w)) * row_bytes(), item);
  }

 private:
  template <typename T>
  T* Row(T* base, size_t offset, size_t row) const {
    using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + offset + row * row_bytes());
  }

  uint32_t items_;
  int workers_;
  size_t row_floats_;
};

}  // namespace mf

#endif  // DSM_EXAMPLES_MATRIX_FACTORIZATION_SHARD_AREA_H_
