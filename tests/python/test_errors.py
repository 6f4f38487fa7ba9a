"""Bad arguments fail before anything is allocated; library failures raise
libdsm.Error subclasses with the library's message."""
import os
import subprocess
import sys

import numpy as np
import pytest

import libdsm


@pytest.mark.parametrize("shape, exc", [
    ((), ValueError),
    ((0,), ValueError),
    ((4, -1), ValueError),
    (-3, ValueError),
    ((2.5,), TypeError),
    ("10", TypeError),
    ((None, 3), TypeError),
])
def test_bad_shapes(session, name, shape, exc):
    with pytest.raises(exc):
        session.alloc(name, shape, np.float32)
    # Nothing was allocated under that name.
    session.alloc(name, 16, np.float32).close()


@pytest.mark.parametrize("dtype", [object, "U4", "V8", "datetime64[s]", "nonsense", None,
                                   np.dtype([("a", "f4"), ("b", "i4")])])
def test_bad_dtypes(session, name, dtype):
    with pytest.raises(TypeError):
        session.alloc(name, 16, dtype)
    session.alloc(name, 16, np.float32).close()


def test_bad_options(session, name):
    with pytest.raises(ValueError, match="tracking"):
        session.alloc(name, 16, np.float32, tracking="everything")
    with pytest.raises(TypeError):
        session.alloc(name, 16, np.float32, tracking=1)
    with pytest.raises(ValueError, match="page_tracker"):
        session.alloc(name, 16, np.float32, page_tracker="magic")
    with pytest.raises(ValueError):
        session.alloc(name, 16, np.float32, reader_buffers=-1)
    with pytest.raises(TypeError):
        session.alloc(42, 16, np.float32)
    with pytest.raises(ValueError):
        session.alloc("", 16, np.float32)
    with pytest.raises(TypeError):
        session.attach(name, timeout="soon")
    with pytest.raises(ValueError):
        session.attach(name, timeout=-1)
    with pytest.raises(ValueError):
        session.alloc(name, 16, np.float32, managed_budget_bytes_per_s=-1)
    with pytest.raises(TypeError):
        session.alloc(name, 16, np.float32, max_line_age="old")
    with pytest.raises(ValueError, match="managed_rank"):
        session.alloc(name, 16, np.float32, managed_budget_bytes_per_s=1, managed_rank="loud")
    session.alloc(name, 16, np.float32).close()


def test_managed_areas_report_their_budget(session, name):
    w = session.alloc(name, 4096, np.float32, tracking="log",
                      managed_budget_bytes_per_s=2_000_000, max_line_age=3)
    st = w.status()
    assert st["managed"] is True
    assert st["managed_budget_bytes_per_s"] == 2_000_000
    assert st["managed_max_line_age"] == 3
    assert st["managed_residual_lines"] == 0  # no other host reads it
    w.close()
    absolute = session.alloc(name + "-absolute", 4096, np.float32, tracking="log",
                             managed_budget_bytes_per_s=2_000_000, managed_rank="absolute")
    assert absolute.status()["managed"] is True
    absolute.close()
    plain = session.alloc(name + "-plain", 16, np.float32)
    assert plain.status()["managed"] is False
    plain.close()


def test_torch_dtypes_are_accepted(session, name):
    torch = pytest.importorskip("torch")
    w = session.alloc(name, (8, 8), torch.float16)
    assert w.array.dtype == np.float16
    assert w.tensor().dtype == torch.float16
    w.close()


def test_library_errors_carry_its_message(session, name):
    w = session.alloc(name, 16, np.float32)
    with pytest.raises(libdsm.ExistsError) as e:
        session.alloc(name, 16, np.float32)
    assert isinstance(e.value, FileExistsError)
    assert e.value.code == -3 and e.value.code_name
    assert name in e.value.message
    with pytest.raises(libdsm.Error) as e:
        session.attach(name + "/missing", timeout=0.1)
    assert name + "/missing" in str(e.value)
    with pytest.raises(libdsm.InvalidError, match="already maps it"):
        session.attach(name, timeout=1)  # this process writes it
    with pytest.raises(libdsm.InvalidError, match="already initialized"):
        libdsm.Session(socket=os.environ["DSM_SOCKET"])
    w.close()


def test_attach_shape_larger_than_area(session, name, py_writer):
    py_writer(name, 100)
    with pytest.raises(ValueError, match="needs 4194304 bytes"):
        session.attach(name, (1 << 20,), np.float32, timeout=5)
    r = session.attach(name, (10, 10), np.float32, timeout=5)  # detached: attach again
    assert r.array.shape == (10, 10)
    r.close()


def run_python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, env=e)


def test_missing_daemon_says_how_to_start_one(tmp_path):
    sock = str(tmp_path / "nobody.sock")
    out = run_python(
        "import libdsm\n"
        "try:\n"
        f"    libdsm.Session(socket={sock!r})\n"
        "except libdsm.NoDaemonError as e:\n"
        "    assert isinstance(e, ConnectionError)\n"
        "    print('raised', e.code_name)\n"
        "    print(e)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("raised")
    assert sock in out.stdout
    assert "dsmd --background" in out.stdout  # how to start one
    # The same through $DSM_SOCKET.
    out = run_python("import libdsm; libdsm.Session()", DSM_SOCKET=sock)
    assert out.returncode == 1
    assert "libdsm.NoDaemonError" in out.stderr and "dsmd --background" in out.stderr


def test_closed_session(dsmd):
    out = run_python(
        "import libdsm, numpy as np\n"
        f"s = libdsm.Session(socket={dsmd.socket!r})\n"
        "s.close()\n"
        "try:\n"
        "    s.alloc('pytest/closed', 4, np.int8)\n"
        "except libdsm.NotInitError as e:\n"
        "    print('raised', e)\n"
        f"s = libdsm.Session(socket={dsmd.socket!r})\n"  # dsm_fini ran: a new one works
        "w = s.alloc('pytest/closed', 4, np.int8)\n"
        "print('version', w.version)\n")
    assert out.returncode == 0, out.stderr
    assert "raised" in out.stdout and "closed" in out.stdout
    assert "version 0" in out.stdout


def test_numpy_only_use_does_not_import_torch(dsmd):
    out = run_python(
        "import sys, numpy as np, libdsm\n"
        f"s = libdsm.Session(socket={dsmd.socket!r})\n"
        "w = s.alloc('pytest/no-torch', 64, np.float32)\n"
        "w.array[:] = 1\n"
        "w.publish()\n"
        "print('torch' in sys.modules)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
