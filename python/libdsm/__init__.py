"""libdsm for Python: shared areas as NumPy arrays and torch tensors, no copies.

A writer process allocates an area and gets a writable ``numpy.ndarray`` over
the area's memory itself; readers in other processes (and, through ``dsmd``, on
other hosts) attach it read-only at the same address and see complete,
numbered versions::

    import libdsm, numpy as np
    s = libdsm.Session()                         # the host's dsmd ($DSM_SOCKET)
    w = s.alloc("model/w", (1024, 1024), np.float32)
    w.array[:] = 0.5                             # plain stores (page tracking)
    w.publish()                                  # version 1

    # another process:
    r = libdsm.Session().attach("model/w", (1024, 1024), np.float32, timeout=5)
    r.wait_version(1, timeout=1)
    x = r.array[3, 4]                            # read-only view of version 1

The snapshot rule: a reader's ``array`` (and every view or zero-copy tensor
made from it) shows one complete version, ``reader.version``, and changes only
at a quiescent point of this process: ``Session.service()``,
``Reader.wait_version()`` or ``Writer.publish()``, for any area. There it
may move, as a whole, to the newest complete version; never torn. Copy
(``reader.copy()``, ``reader.tensor()``) to keep a version past that point.
Threads that read arrays while another thread calls those methods must each
call ``Session.service()`` between their reads, as C threads do (dsm.h).

Every library failure raises a subclass of :class:`libdsm.Error` carrying the
library's message; bad shapes or dtypes raise ``ValueError``/``TypeError``
before anything is allocated. See docs/python.md.
"""

import faulthandler
import math
import operator
import warnings

import numpy as np

from . import _errors
from ._errors import (AddressError, BusyError, DaemonGoneError, Error, ExistsError,
                      InvalidError, NoDaemonError, NoSpaceError, NotFoundError,
                      NotInitError, NotOwnerError, ProtocolError, TimeoutError)
from . import _libdsm

__version__ = "0.1.0"

__all__ = [
    "Session", "Writer", "Reader", "Error", "InvalidError", "NoDaemonError",
    "ExistsError", "NotFoundError", "NoSpaceError", "TimeoutError", "BusyError",
    "NotInitError", "AddressError", "ProtocolError", "DaemonGoneError",
    "NotOwnerError", "DEFAULT_SOCKET",
]

DEFAULT_SOCKET = _libdsm.DEFAULT_SOCKET

_TRACKING = {
    "pages": _libdsm.TRACK_PAGES,
    "log": _libdsm.TRACK_LOG,
    "both": _libdsm.TRACK_LOG_AND_PAGES,
}
_PAGE_TRACKER = {
    "auto": _libdsm.PAGE_TRACKER_AUTO,
    "uffd": _libdsm.PAGE_TRACKER_UFFD,
    "mprotect": _libdsm.PAGE_TRACKER_MPROTECT,
}
_MANAGED_RANK = {
    "relative": _libdsm.ELEMENT_FLOAT32,
    "absolute": _libdsm.ELEMENT_FLOAT32_ABSOLUTE,
}
_LINE_BYTES = 64
_U32_MAX = 2**32 - 1


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError(f"area name must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError("area name must not be empty")


def _check_dtype(dtype):
    """A NumPy dtype of fixed-size numbers from a NumPy or torch dtype."""
    if dtype is None:
        raise TypeError("dtype is required")
    if type(dtype).__module__ == "torch":
        import torch  # only reached when the caller already uses torch
        dtype = torch.empty((), dtype=dtype).numpy().dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"not a dtype: {dtype!r} ({e})") from None
    if dt.kind not in "biufc" or dt.hasobject or dt.subdtype is not None:
        raise TypeError(f"dtype {dt} is not a fixed-size number type "
                        "(bool, int, uint, float or complex)")
    return dt


def _check_shape(shape):
    if isinstance(shape, (list, tuple)):
        dims = shape
    else:
        dims = (shape,)
    out = []
    for d in dims:
        try:
            n = operator.index(d)
        except TypeError:
            raise TypeError(f"shape entries must be integers, got {d!r}") from None
        if n <= 0:
            raise ValueError(f"shape entries must be > 0, got {n} in {tuple(dims)}")
        out.append(n)
    if not out:
        raise ValueError("shape must have at least one dimension")
    return tuple(out)


def _timeout_seconds(timeout):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
    return float(timeout)


def _unsigned(value, what, most):
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {value!r}") from None
    if not 0 <= n <= most:
        raise ValueError(f"{what} must be in 0..{most}, got {n}")
    return n


def _u32(value, what):
    return _unsigned(value, what, _U32_MAX)


def _u64(value, what):
    return _unsigned(value, what, 2**64 - 1)


def _closed(what):
    return NotInitError(-8, "not initialized", f"{what}: it is closed")


def _faulthandler_first():
    """The mprotect page tracker finds writes through a SIGSEGV handler that
    chains to the handler installed before it. Python's faulthandler installed
    after it would take those faults for crashes and end the process. So
    faulthandler goes first: once enabled, a later faulthandler.enable() does
    not install it again."""
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (RuntimeError, ValueError, OSError):  # no usable sys.stderr
            pass


class Session:
    """This process's connection to the host's dsmd (one open Session per process).

    ``socket``: the daemon's Unix socket; None means $DSM_SOCKET, else
    ``DEFAULT_SOCKET``. ``close()`` (or leaving a ``with`` block) disconnects
    once no area of it is in use any more (see ``Writer.close``).
    """

    def __init__(self, socket=None, connect_timeout=2.0):
        if socket is not None and not isinstance(socket, str):
            raise TypeError(f"socket must be a str path or None, not {type(socket).__name__}")
        ms = int(_timeout_seconds(connect_timeout) * 1000)
        self._state = _libdsm._Session(socket or "", min(ms, _U32_MAX))

    def _live(self, what):
        if self._state is None:
            raise _closed(f"Session.{what}")
        return self._state

    def alloc(self, name, shape, dtype, tracking="pages", *, page_tracker="auto",
              sync_interval_us=0, staleness_bound_ms=0, reader_buffers=0,
              managed_budget_bytes_per_s=0, max_line_age=8, managed_rank="relative"):
        """Allocates area ``name`` of ``shape`` x ``dtype``; this process is its writer.

        ``tracking``: "pages" (default: plain stores from NumPy, torch or any
        library are found by page tracking), "log" (only what ``Writer.log``
        records), "both". ``page_tracker``: "auto", "uffd" or "mprotect".
        ``sync_interval_us``, ``staleness_bound_ms``, ``reader_buffers``: 0 is
        the daemon's default (dsm_alloc_opts). ``managed_budget_bytes_per_s``
        > 0 makes a managed area (dsm_alloc_managed: float32 lines, largest
        changes first within that budget, none waiting more than
        ``max_line_age`` versions); ``managed_rank`` "relative" (|new-old|/|old|,
        DSM_ELEMENT_FLOAT32) or "absolute" (|new-old|, DSM_ELEMENT_FLOAT32_ABSOLUTE)
        ranks them. ``status()`` then reports what waits.
        """
        _check_name(name)
        shape = _check_shape(shape)
        dt = _check_dtype(dtype)
        if not isinstance(tracking, str) or not isinstance(page_tracker, str):
            raise TypeError("tracking and page_tracker are strings")
        if tracking not in _TRACKING:
            raise ValueError(f"tracking must be one of {sorted(_TRACKING)}, got {tracking!r}")
        if managed_rank not in _MANAGED_RANK:
            raise ValueError(
                f"managed_rank must be one of {sorted(_MANAGED_RANK)}, got {managed_rank!r}")
        if page_tracker not in _PAGE_TRACKER:
            raise ValueError(
                f"page_tracker must be one of {sorted(_PAGE_TRACKER)}, got {page_tracker!r}")
        opts = (_u32(sync_interval_us, "sync_interval_us"),
                _u32(staleness_bound_ms, "staleness_bound_ms"),
                _u32(reader_buffers, "reader_buffers"),
                _u64(managed_budget_bytes_per_s, "managed_budget_bytes_per_s"),
                _u32(max_line_age, "max_line_age"),
                _MANAGED_RANK[managed_rank])
        nbytes = math.prod(shape) * dt.itemsize
        if tracking != "log" and page_tracker != "uffd":
            _faulthandler_first()
        area = _libdsm.alloc(self._live("alloc"), name, nbytes, _TRACKING[tracking],
                             _PAGE_TRACKER[page_tracker], *opts)
        return Writer(name, area, shape, dt)

    def attach(self, name, shape=None, dtype=np.uint8, *, timeout=5.0):
        """Attaches area ``name`` read-only, waiting up to ``timeout`` seconds for it.

        ``shape`` and ``dtype`` say how to view it (the library knows only its
        size); ``shape=None`` views the whole area as one dimension.
        """
        _check_name(name)
        dt = _check_dtype(dtype)
        if shape is not None:
            shape = _check_shape(shape)
        timeout = _timeout_seconds(timeout)
        area = _libdsm.attach(self._live("attach"), name, timeout)
        if shape is None:
            shape = (area.size // dt.itemsize,)
            if shape[0] == 0:
                raise ValueError(f"area '{name}' ({area.size} bytes) is smaller than one {dt}")
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes > area.size:
            raise ValueError(f"shape {shape} of {dt} needs {nbytes} bytes; area '{name}' "
                             f"has {area.size}")
        return Reader(name, area, shape, dt)

    def service(self):
        """The quiescent point (dsm_service): publishes this process's areas whose
        sync interval has elapsed and moves its readers to the newest versions.
        Returns False if other threads did not reach a quiescent point (retried
        at the next call)."""
        self._live("service")
        return _libdsm.service()

    def thread_offline(self):
        """dsm_thread_offline: the calling thread will not touch arrays for a
        while, so syncs do not wait for it; thread_online() before it does."""
        self._live("thread_offline")
        _libdsm.thread_offline()

    def thread_online(self):
        self._live("thread_online")
        _libdsm.thread_online()

    def close(self):
        """Disconnects (dsm_fini) as soon as no area of this session is in use."""
        self._state = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _AreaHandle:
    """What writers and readers share: the area, its view, versions and status."""

    def __init__(self, name, area, shape, dtype):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self._area = area
        self._array = np.frombuffer(area, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def _live(self, what):
        if self._area is None:
            raise _closed(f"{type(self).__name__}('{self.name}').{what}")
        return self._area

    @property
    def array(self):
        """The ndarray over the area's memory (no copy)."""
        self._live("array")
        return self._array

    @property
    def address(self):
        """The area's address: the same in every process that maps it."""
        return self._live("address").address

    @property
    def nbytes(self):
        return self._array.nbytes

    @property
    def version(self):
        """The version this process sees (a writer: its last published one)."""
        return self._live("version").version()

    def status(self):
        """dsm_status() as a dict: version, latest_version, staleness_ns, stale,
        writer_alive, writer_pid, freed, page_tracker, pages_written, ..."""
        return self._live("status").status()

    def close(self):
        """Releases this handle. The area is freed (writer) or detached (reader)
        when no array or tensor over it is left; until then they stay valid."""
        self._area = None
        self._array = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._area is None else f"version {self.version}"
        return f"<libdsm.{type(self).__name__} '{self.name}' {self.shape} {self.dtype}, {state}>"


class Writer(_AreaHandle):
    """The single writer of an area. ``array`` is writable and is the area itself."""

    def tensor(self):
        """A torch tensor over the same memory (no copy)."""
        import torch
        return torch.from_numpy(self.array)

    def publish(self):
        """Publishes what was written since the last version as one new version.
        Returns False if every spare buffer is held by readers (DSM_ERR_BUSY):
        the changes stay pending and go out at the next publish or service."""
        return self._live("publish").publish()

    def log(self, index=Ellipsis):
        """Records that ``array[index]`` was written (needed with tracking="log").

        ``index`` is anything NumPy indexing takes: an int, a slice, a tuple of
        them, a boolean mask or integer arrays. A strided view logs the bytes
        it spans."""
        area = self._live("log")
        arr = self._array
        idx = index if isinstance(index, tuple) else (index,)
        basic = all(isinstance(i, (int, np.integer, slice)) or i is Ellipsis or i is None
                    for i in idx)
        if basic:
            view = arr[idx + (Ellipsis,)] if Ellipsis not in idx else arr[idx]
            if view.size == 0:
                return
            lo, hi = np.byte_bounds(view)
            area.log(lo - area.address, hi - lo)
            return
        flat = np.arange(arr.size, dtype=np.int64).reshape(arr.shape)[index].ravel()
        if flat.size == 0:
            return
        first = (flat * arr.itemsize) // _LINE_BYTES
        last = (flat * arr.itemsize + arr.itemsize - 1) // _LINE_BYTES
        area.log_lines(np.unique(np.concatenate([first, last])).tolist())


class Reader(_AreaHandle):
    """A read-only replica. ``array`` has writeable=False; it shows version
    ``version`` until this process's next quiescent point (see the module doc)."""

    @property
    def staleness(self):
        """Seconds by which what this process sees may lag the writer."""
        return self._live("staleness").status()["staleness_ns"] / 1e9

    @property
    def stale(self):
        """Staleness over the area's bound, or the writer is gone."""
        return self._live("stale").status()["stale"]

    @property
    def writer_alive(self):
        return self._live("writer_alive").status()["writer_alive"]

    def wait_version(self, version, timeout=1.0):
        """Blocks until this process sees ``version`` or newer (a quiescent
        point: the array may move to a newer version). Raises
        libdsm.TimeoutError (a TimeoutError) if ``timeout`` seconds pass first."""
        v = operator.index(version)
        if v < 0:
            raise ValueError(f"version must be >= 0, got {v}")
        self._live("wait_version").wait_version(v, _timeout_seconds(timeout))

    def copy(self):
        """A private copy of the current version, kept past quiescent points."""
        return self.array.copy()

    def tensor(self, copy=True):
        """The current version as a torch tensor: by default a private copy. With
        ``copy=False`` a tensor over the read-only mapping itself (no copy);
        torch has no read-only tensors, so writing to that one is a fault
        (SIGSEGV) that ends the process: only read it."""
        import torch
        if copy:
            return torch.from_numpy(self.array.copy())
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            return torch.from_numpy(self.array)
