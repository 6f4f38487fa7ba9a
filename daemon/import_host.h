// The host side of AreaImport in dsmd: a replica's control block and buffers
// in the host's shared memory (the writer copy is its staging copy), local
// readers' pins, and the way back to the writer's host.
#ifndef DSM_DAEMON_IMPORT_HOST_H_
#define DSM_DAEMON_IMPORT_HOST_H_

#include <cstdint>
#include <functional>

#include "coherence/area_import.h"
#include "daemon/area_directory.h"
#include "libdsm/contract/shm_layout.h"

namespace dsm {

class ShmImportHost : public ImportHost {
 public:
  // `backing`: the host's backing memory; the replica is area `index` of the
  // directory, attachable by name from its first publish while its origin
  // host names it (SetCurrent); `send_ack` sends an ACK to the writer's host.
  ShmImportHost(AreaDirectory* directory, uint32_t index, AreaControl* area, uint8_t* backing,
                std::function<void(const AckReport&)> send_ack);

  int SpareForNextVersion() override;
  int SpareToPublish() override;
  int SpareBesides(int buffer) override;
  uint32_t Latest() override;
  uint8_t* Buffer(int buffer) override;
  void Publish(uint32_t buffer, uint64_t version, size_t bytes_copied, uint64_t now_ns) override;
  void CaughtUp(size_t bytes) override;
  void SendAck(const AckReport& ack) override { send_ack_(ack); }
  bool InPlaceCapable() override { return true; }
  bool BeginInPlace() override;
  void EndInPlace(uint64_t version, size_t bytes_copied, uint64_t now_ns) override;

  // Local clients can attach it by name (it published a first version).
  bool named() const { return named_; }
  // Whether the origin's host, as last heard, gives the replica's name to its
  // origin area (and not to a newer area): only then may local clients find
  // it by name. A wrong belief lasts until the host's next listing.
  void SetCurrent(bool current);

 private:
  AreaDirectory* directory_;
  uint32_t index_;
  AreaControl& area_;
  uint8_t* backing_;
  std::function<void(const AckReport&)> send_ack_;
  // `buffer` (a spare, or -1: the staging copy) if it may be written (it is
  // marked inexact first), else -1.
  int ForWriting(int buffer);

  int in_place_ = -1;    // the buffer BeginInPlace took
  bool named_ = false;   // attachable by local clients
  bool current_ = true;  // see SetCurrent
};

}  // namespace dsm

#endif  // DSM_DAEMON_IMPORT_HOST_H_
