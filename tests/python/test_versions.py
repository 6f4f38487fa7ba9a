"""Versions, staleness and the snapshot rule, as Python readers see them."""
import os
import signal
import time

import numpy as np
import pytest

import libdsm


def test_versions_and_staleness(session, name, py_writer):
    w = py_writer(name, 4096, staleness_bound_ms=2000)
    r = session.attach(name, (4096,), np.float32, timeout=5)
    for k in (1, 2, 3):
        w.send(f"set {k}")
        assert int(w.expect("version")[0]) == k
        r.wait_version(k, timeout=5)
        assert r.version == k
        assert np.all(r.array == k)
        st = r.status()
        assert st["version"] == k and st["latest_version"] == k
        assert not st["is_writer"] and st["writer_alive"]
        assert st["staleness_bound_ns"] == 2_000_000_000
        assert 0 <= r.staleness < 2.0  # just published: within its bound
        assert not r.stale
    with pytest.raises(libdsm.TimeoutError) as e:
        r.wait_version(4, timeout=0.1)
    assert isinstance(e.value, TimeoutError)  # also the built-in one
    assert "version 3" in str(e.value)  # the library's message
    r.close()


def test_snapshot_holds_until_a_quiescent_point(session, name, py_writer):
    w = py_writer(name, 1 << 16)
    w.send("set 1")
    w.expect("version")
    r = session.attach(name, (1 << 16,), np.float32, timeout=5)
    r.wait_version(1, timeout=5)
    a = r.array
    part = a[100:200]
    w.send("set 2")
    w.expect("version")
    deadline = time.monotonic() + 5
    while r.status()["latest_version"] < 2:  # status() is not a quiescent point
        assert time.monotonic() < deadline
        time.sleep(0.001)
    time.sleep(0.05)
    # Version 2 is complete on this host, but this process has not passed a
    # quiescent point: its arrays still show version 1, all of it.
    assert r.version == 1
    assert np.all(a == 1) and np.all(part == 1)
    kept = r.copy()
    session.service()  # the quiescent point: the same arrays now show version 2
    assert r.version == 2
    assert np.all(a == 2) and np.all(part == 2)
    assert np.all(kept == 1)  # a copy keeps its version
    r.close()


def test_no_torn_version_while_writer_publishes(session, name, py_writer):
    n = 1 << 17  # 1 MiB of int64: a publish copies a lot while the reader reads
    w = py_writer(name, n, "int64")
    r = session.attach(name, (n,), np.int64, timeout=5)
    w.send("spin 400")
    seen = set()
    last = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        session.service()
        v = r.version
        a = r.array
        # Value k is written for version k: the whole array is of one version,
        # and it is the version the reader reports.
        lo, hi = int(a.min()), int(a.max())
        assert lo == hi == v, f"version {v} shows values {lo}..{hi}"
        assert v >= last
        last = v
        seen.add(v)
        if v == 400:
            break
    assert last == 400
    assert len(seen) > 5  # the reader moved on many times while the writer wrote
    assert w.expect("done") == ["400"]
    r.close()


def test_killed_writer_leaves_last_version_stale(session, name, py_writer):
    w = py_writer(name, 8192, staleness_bound_ms=2000)  # stale below: the writer's death
    r = session.attach(name, (8192,), np.float32, timeout=5)
    for k in (1, 2):
        w.send(f"set {k + 4}")
        w.expect("version")
        r.wait_version(k, timeout=5)  # moves on, so the writer has a spare buffer
    assert r.writer_alive and not r.stale
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.wait()
    deadline = time.monotonic() + 10
    while r.writer_alive:
        assert time.monotonic() < deadline, "the writer's death was not noticed in 10 s"
        time.sleep(0.01)
    assert r.stale
    assert r.version == 2
    assert np.all(r.array == 6)  # the last version stays readable
    session.service()
    assert r.version == 2 and np.all(r.array == 6)
    with pytest.raises(libdsm.TimeoutError, match="writer is gone"):
        r.wait_version(3, timeout=0.2)
    r.close()


def test_threads_each_see_whole_versions(session, name, py_writer):
    import threading
    n = 1 << 16
    w = py_writer(name, n, "int64")
    r = session.attach(name, (n,), np.int64, timeout=5)
    results = {}

    def read(tid):
        seen, bad = set(), []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and 300 not in seen:
            session.service()  # this thread's quiescent point: syncs wait for it
            v = r.version
            lo, hi = int(r.array.min()), int(r.array.max())
            if not lo == hi == v:
                bad.append((v, lo, hi))
            seen.add(v)
        session.thread_offline()  # done with areas: others' syncs stop waiting for it
        results[tid] = (seen, bad)

    # This thread only waits below: offline, or the readers' syncs would wait for it.
    session.thread_offline()
    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    w.send("spin 300")
    for t in threads:
        t.join(timeout=30)
    session.thread_online()
    assert w.expect("done") == ["300"]
    for tid in range(2):
        seen, bad = results[tid]
        assert bad == [], f"thread {tid} saw mixed versions: {bad[:3]}"
        assert 300 in seen and len(seen) > 3
    r.close()
