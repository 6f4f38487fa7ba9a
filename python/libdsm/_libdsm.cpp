// The Python binding's native part: thin wrappers over the public C API
// (include/dsm/dsm.h) and nothing else. Shapes, dtypes and NumPy/torch views
// are made in libdsm/__init__.py; this file owns the lifetimes that Python must
// not get wrong: an area stays mapped while any buffer exported from it (and so
// any ndarray or tensor over it) is alive, and the session stays initialized
// while any area is.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "dsm/dsm.h"

namespace py = pybind11;

namespace {

// A failed C call: its code and dsm_last_error()'s message, taken on the thread
// that made the call, right after it.
struct DsmFailure {
  int code;
  std::string message;
};

void Check(int rc) {
  if (rc != DSM_OK) throw DsmFailure{rc, dsm_last_error()};
}

// Runs f with the GIL released if this thread holds it: dsm_free and dsm_fini
// may wait (bounded) for other hosts to hold an area's last version, and other
// Python threads need not wait with them.
template <typename F>
void WithoutGil(F f) {
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;
    f();
  } else {
    f();
  }
}

// dsm_init ... dsm_fini. Shared by the Python Session and every area it made,
// so dsm_fini runs only when none of them is left.
class SessionState {
 public:
  explicit SessionState(const std::string& socket, uint32_t connect_timeout_ms) {
    dsm_init_opts o{};
    o.socket_path = socket.empty() ? nullptr : socket.c_str();
    o.connect_timeout_ms = connect_timeout_ms;
    Check(dsm_init(&o));
  }
  ~SessionState() {
    WithoutGil([] { dsm_fini(); });
  }
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;
};

// One area, written or read by this process. Python exports its bytes through
// the buffer protocol; each exported buffer holds a reference to this object,
// so dsm_free runs only after the last view of the memory is gone.
class Area {
 public:
  Area(std::shared_ptr<SessionState> session, void* ptr, size_t size, bool writer)
      : session_(std::move(session)), ptr_(ptr), size_(size), writer_(writer) {}
  ~Area() {
    if (ptr_) WithoutGil([this] { dsm_free(ptr_); });
  }
  Area(const Area&) = delete;
  Area& operator=(const Area&) = delete;

  uintptr_t address() const { return reinterpret_cast<uintptr_t>(ptr_); }
  size_t size() const { return size_; }
  bool is_writer() const { return writer_; }
  void* ptr() const { return ptr_; }

 private:
  std::shared_ptr<SessionState> session_;
  void* ptr_;
  size_t size_;
  bool writer_;
};

uint32_t TimeoutMs(double seconds) {
  if (!(seconds >= 0)) throw std::invalid_argument("timeout must be a number of seconds >= 0");
  const double ms = seconds * 1000.0;
  return ms >= 4294967295.0 ? UINT32_MAX : static_cast<uint32_t>(ms + 0.5);
}

// `budget_bytes_per_s` 0: an area sent whole (dsm_alloc); else managed.
std::unique_ptr<Area> Alloc(std::shared_ptr<SessionState> session, const std::string& name,
                            size_t size, uint32_t tracking, uint32_t page_tracker,
                            uint32_t sync_interval_us, uint32_t staleness_bound_ms,
                            uint32_t reader_buffers, uint64_t budget_bytes_per_s,
                            uint32_t max_line_age, uint32_t element) {
  dsm_alloc_opts o{};
  o.tracking = tracking;
  o.page_tracker = page_tracker;
  o.sync_interval_us = sync_interval_us;
  o.staleness_bound_ms = staleness_bound_ms;
  o.reader_buffers = reader_buffers;
  dsm_managed_opts m{};
  m.budget_bytes_per_s = budget_bytes_per_s;
  m.max_line_age = max_line_age;
  m.element = element;
  void* p = nullptr;
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = budget_bytes_per_s != 0 ? dsm_alloc_managed(name.c_str(), size, &o, &m, &p)
                                 : dsm_alloc(name.c_str(), size, &o, &p);
  }
  Check(rc);
  return std::make_unique<Area>(std::move(session), p, size, true);
}

std::unique_ptr<Area> Attach(std::shared_ptr<SessionState> session, const std::string& name,
                             double timeout_s) {
  const uint32_t ms = TimeoutMs(timeout_s);
  const void* p = nullptr;
  size_t size = 0;
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = dsm_attach(name.c_str(), ms, &p, &size);
  }
  Check(rc);
  return std::make_unique<Area>(std::move(session), const_cast<void*>(p), size, false);
}

py::dict StatusDict(const Area& a) {
  dsm_area_status st{};
  Check(dsm_status(a.ptr(), &st));
  py::dict d;
  d["version"] = st.version;
  d["latest_version"] = st.latest_version;
  d["staleness_ns"] = st.staleness_ns;
  d["staleness_bound_ns"] = st.staleness_bound_ns;
  d["size"] = st.size;
  d["writer_pid"] = st.writer_pid;
  d["is_writer"] = st.is_writer != 0;
  d["writer_alive"] = st.writer_alive != 0;
  d["stale"] = st.stale != 0;
  d["freed"] = st.freed != 0;
  d["publishes_deferred"] = st.publishes_deferred;
  d["tracking"] = st.tracking;
  d["page_tracker"] = dsm_page_tracker_name(st.page_tracker);
  d["pages_written"] = st.pages_written;
  d["lines_changed"] = st.lines_changed;
  dsm_managed_status ms{};
  Check(dsm_status_managed(a.ptr(), &ms));
  d["managed"] = ms.managed != 0;
  if (ms.managed != 0) {
    d["managed_budget_bytes_per_s"] = ms.budget_bytes_per_s;
    d["managed_max_line_age"] = ms.max_line_age;
    d["managed_residual_lines"] = ms.residual_lines;
    d["managed_oldest_lag"] = ms.oldest_lag;
  }
  return d;
}

// Returns true if a version was published (or nothing was pending), false if
// every spare buffer was held (DSM_ERR_BUSY: the changes go out later).
bool Publish(const Area& a) {
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = dsm_publish(a.ptr());
  }
  if (rc == DSM_ERR_BUSY) return false;
  Check(rc);
  return true;
}

// Raises (through Check) on DSM_ERR_TIMEOUT too: Python maps it to TimeoutError.
bool WaitVersion(const Area& a, uint64_t v, double timeout_s) {
  const uint32_t ms = TimeoutMs(timeout_s);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = dsm_wait_version(a.ptr(), v, ms);
  }
  Check(rc);
  return true;
}

// Logs the lines [offset, offset + len) of the area (the writer only).
void Log(const Area& a, size_t offset, size_t len) {
  if (len == 0) return;
  if (offset > a.size() || len > a.size() - offset) {
    throw std::out_of_range("log range outside the area");
  }
  Check(dsm_log(static_cast<const char*>(a.ptr()) + offset, len));
}

// Logs a batch of 64-byte lines given by index (from fancy indexing).
void LogLines(const Area& a, const std::vector<uint64_t>& lines) {
  const uint64_t n = (a.size() + 63) / 64;
  for (uint64_t line : lines) {
    if (line >= n) throw std::out_of_range("log line outside the area");
    const size_t off = line * 64;
    const size_t len = std::min<size_t>(64, a.size() - off);
    Check(dsm_log(static_cast<const char*>(a.ptr()) + off, len));
  }
}

bool Service() {
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = dsm_service();
  }
  if (rc == DSM_ERR_BUSY) return false;
  Check(rc);
  return true;
}

}  // namespace

PYBIND11_MODULE(_libdsm, m) {
  m.doc() = "libdsm's native binding over the public C API (use the libdsm package)";

  // libdsm._errors turns (code, code name, message) into its exception classes.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DsmFailure& e) {
      try {
        py::object exc = py::module_::import("libdsm._errors")
                             .attr("make_error")(e.code, dsm_strerror(e.code), e.message);
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      } catch (py::error_already_set&) {
        PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
      }
    }
  });

  m.attr("DEFAULT_SOCKET") = DSM_DEFAULT_SOCKET;
  m.attr("TRACK_LOG") = static_cast<int>(DSM_TRACK_LOG);
  m.attr("TRACK_PAGES") = static_cast<int>(DSM_TRACK_PAGES);
  m.attr("TRACK_LOG_AND_PAGES") = static_cast<int>(DSM_TRACK_LOG_AND_PAGES);
  m.attr("PAGE_TRACKER_AUTO") = static_cast<int>(DSM_PAGE_TRACKER_AUTO);
  m.attr("PAGE_TRACKER_UFFD") = static_cast<int>(DSM_PAGE_TRACKER_UFFD);
  m.attr("PAGE_TRACKER_MPROTECT") = static_cast<int>(DSM_PAGE_TRACKER_MPROTECT);
  m.attr("ELEMENT_FLOAT32") = static_cast<int>(DSM_ELEMENT_FLOAT32);
  m.attr("ELEMENT_FLOAT32_ABSOLUTE") = static_cast<int>(DSM_ELEMENT_FLOAT32_ABSOLUTE);
  m.attr("ERR_TIMEOUT") = static_cast<int>(DSM_ERR_TIMEOUT);

  m.def("strerror", [](int code) { return std::string(dsm_strerror(code)); });

  py::class_<SessionState, std::shared_ptr<SessionState>>(m, "_Session")
      .def(py::init<const std::string&, uint32_t>(), py::arg("socket"),
           py::arg("connect_timeout_ms"));

  py::class_<Area>(m, "_Area", py::buffer_protocol())
      .def_property_readonly("address", &Area::address)
      .def_property_readonly("size", &Area::size)
      .def_property_readonly("is_writer", &Area::is_writer)
      .def_buffer([](Area& a) -> py::buffer_info {
        return py::buffer_info(a.ptr(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(a.size())}, {py::ssize_t{1}},
                               /*readonly=*/!a.is_writer());
      })
      .def("version",
           [](const Area& a) {
             uint64_t v = 0;
             Check(dsm_get_version(a.ptr(), &v));
             return v;
           })
      .def("status", &StatusDict)
      .def("publish", &Publish)
      .def("wait_version", &WaitVersion)
      .def("log", &Log)
      .def("log_lines", &LogLines);

  m.def("alloc", &Alloc);
  m.def("attach", &Attach);
  m.def("service", &Service);
  m.def("thread_offline", [] { Check(dsm_thread_offline()); });
  m.def("thread_online", [] { Check(dsm_thread_online()); });
}
