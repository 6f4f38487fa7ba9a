"""Fixtures for the Python package's tests: a private dsmd (memfd backing, its
own socket), this process's one libdsm.Session on it, and helpers that start
writers and readers in other processes (Python: py_writer.py; C++: dsm_peer).

Run by `meson test --suite multiprocess` (test `python`), which sets DSM_DSMD,
DSM_PEER, DSM_BUILD_ROOT and puts the build tree's package on PYTHONPATH.
"""
import ctypes
import itertools
import os
import queue
import socket as socketlib
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # A child of the test process ends with it, even if a timeout kills it.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, 9)


def required_env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run these tests with "
                           "`meson test -C build python`")
    return value


class Dsmd:
    """A dsmd process on a socket in a fresh temporary directory."""

    def __init__(self, binary, env=None):
        self.dir = tempfile.mkdtemp(prefix="dsm-pytest-")
        self.socket = os.path.join(self.dir, "dsmd.sock")
        self.proc = subprocess.Popen(
            [binary, "--socket", self.socket, "--backing", "memfd", "--region-size", "256M",
             "--log-level", "warn"], env=env, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dsmd exited with {self.proc.returncode}")
            try:
                with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_SEQPACKET) as s:
                    s.connect(self.socket)
                return
            except OSError:
                time.sleep(0.01)
        self.stop()
        raise RuntimeError("dsmd did not accept connections within 10 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["rm", "-rf", self.dir], check=False)


@pytest.fixture(scope="session")
def dsmd():
    d = Dsmd(required_env("DSM_DSMD"))
    old = os.environ.get("DSM_SOCKET")
    os.environ["DSM_SOCKET"] = d.socket  # for the processes the tests start
    yield d
    if old is None:
        os.environ.pop("DSM_SOCKET", None)
    else:
        os.environ["DSM_SOCKET"] = old
    d.stop()


@pytest.fixture(scope="session")
def session(dsmd):
    import libdsm
    s = libdsm.Session(socket=dsmd.socket)
    yield s
    s.close()


_names = itertools.count()


@pytest.fixture
def name(request):
    """An area name no other test uses."""
    return f"pt/{request.node.name[:40]}/{next(_names)}"  # names: at most 63 bytes


class Child:
    """A process driven line by line over stdin/stdout."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=_die_with_parent)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, word, timeout=10):
        """Reads lines until one starts with `word`; returns its other fields."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no '{word}' from the child within {timeout} s") from None
            if line is None:
                err = self.proc.stderr.read()
                raise AssertionError(f"child exited ({self.proc.wait()}) before '{word}': {err}")
            fields = line.split()
            if fields and fields[0] == word:
                return fields[1:]

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self, timeout=10):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def children():
    """Starts Child processes and ends those still running at the test's end."""
    started = []

    def start(argv):
        c = Child(argv)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
        c.proc.wait()


@pytest.fixture
def py_writer(dsmd, children):
    """Starts py_writer.py (a Python writer in another process)."""

    def start(name, count, dtype="float32", tracking="pages", staleness_bound_ms=0):
        c = children([sys.executable, os.path.join(HERE, "py_writer.py"), name, str(count),
                      dtype, tracking, str(staleness_bound_ms)])
        c.address = int(c.expect("ready")[0])
        return c

    return start


@pytest.fixture
def peer(dsmd):
    """The C++ peer: dsm_peer write|dump (see dsm_peer.cpp)."""
    return required_env("DSM_PEER")


def peer_dump(peer, name, count, version):
    """Runs `dsm_peer dump`: returns (address, version, values as floats)."""
    out = subprocess.run([peer, "dump", name, str(count), str(version)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    _, address, seen = lines[0].split()
    values = []
    for line in lines[1:]:
        if line:
            value, times = line.split(" x")
            values += [float(value)] * int(times)
    return int(address), int(seen), values
