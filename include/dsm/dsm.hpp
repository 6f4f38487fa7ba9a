// libdsm C++ API: RAII and typed handles over the C API in dsm.h. No exceptions:
// fallible calls return dsm::Status, and handles carry the status of the call
// that made them (creation_status(); test them with `if (!handle)`).
#ifndef DSM_DSM_HPP_
#define DSM_DSM_HPP_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "dsm/dsm.h"

namespace dsm {

// A status code and, on failure, the message that explains it. The message is
// taken when the Status is made and never changes.
class Status {
 public:
  Status() = default;
  // The result of the C call that just returned `code` on this thread: a failed
  // call has set dsm_last_error() to its own message, which this copies. Make
  // it right after the call, before any other libdsm call.
  explicit Status(int code) : code_(code), message_(code == DSM_OK ? "" : dsm_last_error()) {}
  // A failure found without a C call, with its own message.
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == DSM_OK; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code name: message", for logs.
  std::string ToString() const {
    return ok() ? "ok" : std::string(dsm_strerror(code_)) + ": " + message_;
  }

 private:
  int code_ = DSM_OK;
  std::string message_;
};

// Connects this process to the local dsmd for the object's lifetime.
class Session {
 public:
  explicit Session(const dsm_init_opts* opts = nullptr) : status_(dsm_init(opts)) {}
  explicit Session(const std::string& socket_path) {
    dsm_init_opts o{};
    o.socket_path = socket_path.c_str();
    status_ = Status(dsm_init(&o));
  }
  ~Session() {
    if (status_.ok()) dsm_fini();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  explicit operator bool() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The quiescent point: see dsm_service().
  Status service() { return Status(dsm_service()); }

 private:
  Status status_;
};

// A stored element of a writable area: assigning to it stores and logs.
template <typename T>
class LoggedRef {
 public:
  explicit LoggedRef(T* p) : p_(p) {}
  LoggedRef& operator=(const T& v) {
    *p_ = v;
    dsm_log(p_, sizeof(T));
    return *this;
  }
  LoggedRef& operator+=(const T& v) { return *this = *p_ + v; }
  LoggedRef& operator-=(const T& v) { return *this = *p_ - v; }
  operator const T&() const { return *p_; }

 private:
  T* p_;
};

namespace internal {
// Shared by both handle kinds: the area pointer, its element count, and the
// status of the alloc or attach that made the handle.
template <typename T, typename Ptr>
class AreaHandle {
 public:
  explicit operator bool() const { return status_.ok(); }
  // How the alloc or attach that made this handle went; later calls return
  // their own Status.
  const Status& creation_status() const { return status_; }
  size_t size() const { return count_; }
  Ptr data() const { return ptr_; }
  // Sets *v to the version this process sees (the writer: its last published
  // one). Fails if the handle holds no area (creation failed, or released).
  Status version(uint64_t* v) const {
    return ptr_ ? Status(dsm_get_version(ptr_, v)) : NoArea("version");
  }
  // Fills *st with the area's version, staleness and tracking: see dsm_status().
  Status area_status(dsm_area_status* st) const {
    return ptr_ ? Status(dsm_status(ptr_, st)) : NoArea("area_status");
  }
  // Fills *st with how a managed area's versions are sent: see dsm_status_managed().
  Status managed_status(dsm_managed_status* st) const {
    return ptr_ ? Status(dsm_status_managed(ptr_, st)) : NoArea("managed_status");
  }
  Status wait_version(uint64_t v, std::chrono::milliseconds timeout) const {
    if (!ptr_) return NoArea("wait_version");
    return Status(dsm_wait_version(ptr_, v, static_cast<uint32_t>(timeout.count())));
  }
  // Frees (writer) or detaches (reader) now rather than at destruction.
  Status release() {
    if (!ptr_) return Status();
    Status s(dsm_free(ptr_));
    ptr_ = nullptr;
    count_ = 0;
    return s;
  }

 protected:
  AreaHandle() = default;
  AreaHandle(AreaHandle&& o) noexcept { *this = std::move(o); }
  AreaHandle& operator=(AreaHandle&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    std::swap(status_, o.status_);
    return *this;
  }
  ~AreaHandle() { release(); }

  // The Status of a call on a handle without an area, saying why it has none.
  Status NoArea(const char* fn) const {
    const std::string why = status_.ok() ? "it was released or default-constructed"
                                         : "its alloc or attach failed: " + status_.ToString();
    return Status(DSM_ERR_INVALID, std::string(fn) + "(): this handle holds no area; " + why);
  }

  Ptr ptr_ = nullptr;
  size_t count_ = 0;
  Status status_;
};
}  // namespace internal

template <typename T>
class Writable;

namespace internal {
template <typename T>
Writable<T> AllocWritable(const char* fn, const std::string& name, size_t count,
                          const dsm_alloc_opts* opts, const dsm_managed_opts* managed);
}  // namespace internal

// The writer's handle: element access logs stores; data() gives the raw pointer
// (then log with log() or dsm_log()).
template <typename T>
class Writable : public internal::AreaHandle<T, T*> {
  static_assert(std::is_trivially_copyable_v<T>, "areas hold trivially copyable data");

 public:
  Writable() = default;
  LoggedRef<T> operator[](size_t i) const { return LoggedRef<T>(this->ptr_ + i); }
  // Logs elements [first, first + n) as written.
  Status log(size_t first, size_t n) const {
    return Status(dsm_log(this->ptr_ + first, n * sizeof(T)));
  }
  Status publish() const {
    return this->ptr_ ? Status(dsm_publish(this->ptr_)) : this->NoArea("publish");
  }

 private:
  template <typename U>
  friend Writable<U> internal::AllocWritable(const char*, const std::string&, size_t,
                                             const dsm_alloc_opts*, const dsm_managed_opts*);
};

// A reader's handle: read-only, at the same address the writer uses.
template <typename T>
class Readable : public internal::AreaHandle<T, const T*> {
 public:
  Readable() = default;
  const T& operator[](size_t i) const { return this->ptr_[i]; }

 private:
  template <typename U>
  friend Readable<U> attach(const std::string&, std::chrono::milliseconds);
};

namespace internal {

// The alloc behind alloc() and alloc_managed() (`managed`: nullptr for dsm_alloc).
template <typename T>
Writable<T> AllocWritable(const char* fn, const std::string& name, size_t count,
                          const dsm_alloc_opts* opts, const dsm_managed_opts* managed) {
  Writable<T> w;
  if (count > SIZE_MAX / sizeof(T)) {
    w.status_ =
        Status(DSM_ERR_INVALID, std::string(fn) + "('" + name + "'): " + std::to_string(count) +
                                    " elements of " + std::to_string(sizeof(T)) +
                                    " bytes overflow size_t; ask for fewer");
    return w;
  }
  void* p = nullptr;
  const int rc = managed ? dsm_alloc_managed(name.c_str(), count * sizeof(T), opts, managed, &p)
                         : dsm_alloc(name.c_str(), count * sizeof(T), opts, &p);
  w.status_ = Status(rc);
  if (rc == DSM_OK) {
    w.ptr_ = static_cast<T*>(p);
    w.count_ = count;
  }
  return w;
}

}  // namespace internal

// Allocates an area of `count` elements of T; this process becomes its writer.
template <typename T>
Writable<T> alloc(const std::string& name, size_t count, const dsm_alloc_opts* opts = nullptr) {
  return internal::AllocWritable<T>("dsm::alloc", name, count, opts, nullptr);
}

// The same, managed: its versions reach other hosts within `managed`'s
// budget (see dsm_alloc_managed()).
template <typename T>
Writable<T> alloc_managed(const std::string& name, size_t count, const dsm_managed_opts& managed,
                          const dsm_alloc_opts* opts = nullptr) {
  return internal::AllocWritable<T>("dsm::alloc_managed", name, count, opts, &managed);
}

// Attaches the area `name` read-only, waiting up to `timeout` for it to exist.
template <typename T>
Readable<T> attach(const std::string& name, std::chrono::milliseconds timeout) {
  Readable<T> r;
  const void* p = nullptr;
  size_t bytes = 0;
  const int rc = dsm_attach(name.c_str(), static_cast<uint32_t>(timeout.count()), &p, &bytes);
  r.status_ = Status(rc);
  if (rc == DSM_OK) {
    r.ptr_ = static_cast<const T*>(p);
    r.count_ = bytes / sizeof(T);
  }
  return r;
}

}  // namespace dsm

#endif  // DSM_DSM_HPP_
