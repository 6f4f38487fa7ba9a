"""Zero copy: arrays and tensors are the area's memory, in both directions
between Python and C++ processes; readers' arrays are read-only."""
import ctypes

import numpy as np
import pytest

import libdsm
from conftest import peer_dump

REGION_BASE = 0x500000000000
REGION_BYTES = 4 << 40


def data_address(a):
    return a.__array_interface__["data"][0]


def test_writer_array_is_the_area(session, name):
    w = session.alloc(name, (64, 1024), np.float32)
    a = w.array
    assert isinstance(a, np.ndarray)
    assert a.shape == (64, 1024) and a.dtype == np.float32
    assert a.flags.writeable and a.flags.c_contiguous
    assert data_address(a) == w.address
    assert REGION_BASE <= w.address < REGION_BASE + REGION_BYTES
    assert w.array is a  # one view, not a new copy per access
    # A store through the array is a store into the area's memory.
    a[3, 5] = 2.5
    assert ctypes.c_float.from_address(w.address + (3 * 1024 + 5) * 4).value == 2.5
    assert w.status()["tracking"] == 1  # DSM_TRACK_PAGES: the Python default
    w.close()


def test_python_write_seen_by_cpp_reader(session, name, peer):
    n = 50_000
    w = session.alloc(name, n, np.float32)  # page tracking: no log() calls below
    w.array[:] = 3.25
    w.array[10:20] *= 2
    assert w.publish()
    address, version, values = peer_dump(peer, name, n, 1)
    assert address == w.address
    assert version == 1
    expected = np.full(n, 3.25, np.float32)
    expected[10:20] = 6.5
    np.testing.assert_array_equal(np.array(values, np.float32), expected)
    w.close()


def test_torch_tensor_is_the_area(session, name, peer):
    torch = pytest.importorskip("torch")
    n = 4096
    w = session.alloc(name, (n,), torch.float32)
    t = w.tensor()
    assert t.data_ptr() == w.address
    assert t.dtype == torch.float32 and tuple(t.shape) == (n,)
    t.fill_(1.5)
    t[100:200].mul_(4)  # plain stores by torch, found by page tracking
    assert w.array[150] == 6.0  # the same memory as the array
    assert w.publish()
    _, version, values = peer_dump(peer, name, n, 1)
    assert version == 1
    assert values[:100] == [1.5] * 100
    assert values[100:200] == [6.0] * 100
    assert values[200:] == [1.5] * (n - 200)
    w.close()


def test_cpp_write_seen_by_python_reader(session, name, peer, children):
    n = 10_000
    c = children([peer, "write", name, str(n), "7.5"])
    address, version = map(int, c.expect("ready"))
    r = session.attach(name, (n,), np.float32, timeout=5)
    assert r.address == address
    r.wait_version(version, timeout=5)
    assert data_address(r.array) == address
    assert np.all(r.array == 7.5)
    c.send("set -1.25")
    v2 = int(c.expect("version")[0])
    r.wait_version(v2, timeout=5)
    assert r.version >= v2
    assert np.all(r.array == -1.25)
    r.close()
    assert c.close() == 0


def test_reader_arrays_are_read_only(session, name, py_writer):
    w = py_writer(name, 1024)
    w.send("set 4")
    w.expect("version")
    r = session.attach(name, (32, 32), np.float32, timeout=5)
    r.wait_version(1, timeout=5)
    a = r.array
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1
    with pytest.raises(ValueError):
        a.setflags(write=True)
    with pytest.raises(ValueError, match="read-only"):
        np.add(a, 1, out=a)
    view = a[2:4]
    assert not view.flags.writeable
    assert np.all(a == 4)  # nothing was written
    c = r.copy()
    assert c.flags.writeable and data_address(c) != r.address
    r.close()


def test_reader_tensor_copy_or_view(session, name, py_writer):
    torch = pytest.importorskip("torch")
    w = py_writer(name, 256)
    w.send("set 2")
    w.expect("version")
    r = session.attach(name, (256,), np.float32, timeout=5)
    r.wait_version(1, timeout=5)
    copied = r.tensor()
    assert copied.data_ptr() != r.address
    copied += 1  # a private copy: writable
    view = r.tensor(copy=False)
    assert view.data_ptr() == r.address
    assert torch.all(view == 2) and torch.all(copied == 3)
    r.close()


def test_attach_views_whole_area_by_default(session, name, py_writer):
    py_writer(name, 1000, "int32")
    r = session.attach(name, timeout=5)
    assert r.array.dtype == np.uint8
    assert r.array.shape == (4000,)  # the size the writer asked for
    r.close()


def test_log_tracking_ships_only_logged_lines(session, name, peer):
    n = 1024
    w = session.alloc(name, n, np.float32, tracking="log")
    a = w.array
    a[0:100] = 7
    w.log(slice(0, 100))
    a[200] = 9  # not logged: stays out of the version
    a[[300, 301]] = 4
    w.log([300, 301])
    a[500] = 5
    w.log(500)
    assert w.publish()
    _, version, values = peer_dump(peer, name, n, 1)
    expected = [0.0] * n
    expected[0:100] = [7.0] * 100
    expected[300:302] = [4.0, 4.0]
    expected[500] = 5.0
    assert version == 1
    assert values == expected
    w.close()


def test_log_of_a_2d_block(session, name, peer):
    w = session.alloc(name, (64, 64), np.float32, tracking="log")
    w.array[10:12, :] = 1
    w.log((slice(10, 12), Ellipsis))
    w.array[40, 3] = 2
    w.log((40, 3))
    w.array[50, 50] = 3  # not logged
    assert w.publish()
    _, _, values = peer_dump(peer, name, 64 * 64, 1)
    got = np.array(values, np.float32).reshape(64, 64)
    expected = np.zeros((64, 64), np.float32)
    expected[10:12, :] = 1
    expected[40, 3] = 2
    np.testing.assert_array_equal(got, expected)
    w.close()


def test_close_frees_when_last_array_is_gone(session, name):
    w = session.alloc(name, 1000, np.int64)
    a = w.array
    a[:] = 11
    w.close()
    with pytest.raises(libdsm.NotInitError):
        w.publish()
    assert a.sum() == 11 * 1000  # still mapped: the array keeps the area
    with pytest.raises(libdsm.ExistsError):
        session.alloc(name, 1000, np.int64)
    del a  # the last view: now the area is freed and its name is free again
    w2 = session.alloc(name, 1000, np.int64)
    w2.close()


def test_mprotect_tracker_with_faulthandler_enabled_later(dsmd, name, peer):
    # The mprotect tracker's SIGSEGV handler must survive a program that
    # enables faulthandler after allocating (pytest itself enables it first).
    import subprocess
    import sys
    code = (
        "import faulthandler, libdsm, numpy as np\n"
        f"w = libdsm.Session(socket={dsmd.socket!r}).alloc({name!r}, 50000, np.float32,\n"
        "    page_tracker='mprotect')\n"
        "faulthandler.enable()\n"
        "w.array[:] = 1\n"
        "w.array[1000:2000] += 2\n"
        "assert w.status()['page_tracker'] == 'mprotect'\n"
        "assert w.publish()\n"
        "print('published', w.version, flush=True)\n"
        "import sys; sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line == "published 1\n", proc.stderr.read() if not line else line
        _, version, values = peer_dump(peer, name, 50000, 1)
        assert version == 1
        assert values == [1.0] * 1000 + [3.0] * 1000 + [1.0] * 48000
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
