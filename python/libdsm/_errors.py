"""Exceptions for libdsm's status codes.

Every failure of a library call raises a subclass of :class:`Error` whose
message is the library's own (``dsm_last_error()``), with the status code in
``code`` and its name (``dsm_strerror()``) in ``code_name``. Where a built-in
exception means the same thing, the class derives from it too, so
``except TimeoutError`` or ``except FileExistsError`` work as usual.
"""


class Error(Exception):
    """A libdsm call failed. ``code`` is the dsm_code, ``code_name`` its name."""

    def __init__(self, code, code_name, message):
        super().__init__(message)
        self.code = code
        self.code_name = code_name
        self.message = message

    def __str__(self):
        return f"{self.code_name}: {self.message}"


class InvalidError(Error, ValueError):
    """DSM_ERR_INVALID: a bad argument or a wrong use of the API."""


class NoDaemonError(Error, ConnectionError):
    """DSM_ERR_NO_DAEMON: no dsmd answers on the socket."""


class ExistsError(Error, FileExistsError):
    """DSM_ERR_EXISTS: an area with that name already exists."""


class NotFoundError(Error, LookupError):
    """DSM_ERR_NOT_FOUND: no such area."""


class NoSpaceError(Error, MemoryError):
    """DSM_ERR_NO_SPACE: the host's region or backing memory is full."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 - also the built-in one
    """DSM_ERR_TIMEOUT: the wait ended before the condition held."""


class BusyError(Error):
    """DSM_ERR_BUSY: could not sync now; retried later."""


class NotInitError(Error):
    """DSM_ERR_NOT_INIT: the session is closed."""


class AddressError(Error):
    """DSM_ERR_ADDRESS: the shared region's fixed address is taken in this process."""


class SystemError_(Error, OSError):
    """DSM_ERR_SYSTEM: a system call failed."""


class ProtocolError(Error):
    """DSM_ERR_PROTOCOL: the daemon speaks another protocol version."""


class DaemonGoneError(Error, ConnectionError):
    """DSM_ERR_DAEMON_GONE: the daemon stopped; shared data stays readable."""


class NotOwnerError(Error, PermissionError):
    """DSM_ERR_NOT_OWNER: this process is not the area's writer."""


_BY_CODE = {
    -1: InvalidError,
    -2: NoDaemonError,
    -3: ExistsError,
    -4: NotFoundError,
    -5: NoSpaceError,
    -6: TimeoutError,
    -7: BusyError,
    -8: NotInitError,
    -9: AddressError,
    -10: SystemError_,
    -11: ProtocolError,
    -12: DaemonGoneError,
    -13: NotOwnerError,
}


def make_error(code, code_name, message):
    """The exception for a failed call (used by the native module)."""
    return _BY_CODE.get(code, Error)(code, code_name, message)


# Tracebacks name them as the package exports them: libdsm.NoDaemonError.
for _cls in (Error, *_BY_CODE.values()):
    _cls.__module__ = "libdsm"
