"""`meson install` into a staging dir (--destdir): the library, headers,
libdsm.pc, dsmd, dsmctl and the Python package are there, a program outside the
tree builds with `pkg-config --cflags --libs libdsm` and runs against the staged
dsmd, and the staged Python package imports and works."""
import glob
import json
import os
import shlex
import subprocess
import sys

import pytest

from conftest import Dsmd, required_env

PROGRAM = r"""
#include <dsm/dsm.hpp>

#include <cstdio>

int main() {
  dsm::Session s;
  if (!s) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  auto w = dsm::alloc<float>("install/hello", 1024);
  if (!w) {
    std::fprintf(stderr, "%s\n", w.creation_status().ToString().c_str());
    return 1;
  }
  w[7] = 42.0f;
  dsm::Status st(dsm_publish(w.data()));
  uint64_t v = 0;
  w.version(&v);
  std::printf("published %s version %llu value %g\n", st.ok() ? "ok" : st.ToString().c_str(),
              static_cast<unsigned long long>(v), static_cast<double>(w.data()[7]));
  return st.ok() && v == 1 ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """Installs the build tree into a staging dir; returns (destdir, options)."""
    build = required_env("DSM_BUILD_ROOT")
    destdir = str(tmp_path_factory.mktemp("stage"))
    out = subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--quiet",
                          "--destdir", destdir], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    opts = {o["name"]: o["value"] for o in json.loads(subprocess.run(
        ["meson", "introspect", "--buildoptions", build], capture_output=True, text=True,
        check=True).stdout)}
    return destdir, opts


def staged_path(destdir, opts, *parts):
    return os.path.join(destdir + opts["prefix"], *parts)


def test_installs_library_headers_pc_and_daemons(staged):
    destdir, opts = staged
    libdir = staged_path(destdir, opts, opts["libdir"])
    assert os.path.exists(os.path.join(libdir, "libdsm.so.2"))
    assert os.path.islink(os.path.join(libdir, "libdsm.so"))
    assert os.path.exists(os.path.join(libdir, "pkgconfig", "libdsm.pc"))
    inc = staged_path(destdir, opts, opts["includedir"], "dsm")
    assert sorted(os.listdir(inc)) == ["dsm.h", "dsm.hpp"]
    for exe in ("dsmd", "dsmctl"):
        path = staged_path(destdir, opts, opts["bindir"], exe)
        assert os.access(path, os.X_OK), path
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and exe in out.stdout
    assert glob.glob(os.path.join(destdir + opts["prefix"], "**", "libdsm", "_libdsm*.so"),
                     recursive=True)


def test_program_outside_the_tree_builds_with_pkg_config(staged, tmp_path):
    destdir, opts = staged
    libdir = staged_path(destdir, opts, opts["libdir"])
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=destdir)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdsm"], env=env,
                           capture_output=True, text=True)
    assert flags.returncode == 0, flags.stderr
    assert f"-L{libdir}" in flags.stdout and "-ldsm" in flags.stdout
    src = tmp_path / "hello.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "hello"
    cc = subprocess.run(["c++", "-std=c++20", str(src), "-o", str(exe)]
                        + shlex.split(flags.stdout), capture_output=True, text=True, timeout=120)
    assert cc.returncode == 0, cc.stderr
    # Against a daemon of its own, the staged dsmd.
    d = Dsmd(staged_path(destdir, opts, opts["bindir"], "dsmd"))
    try:
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30,
                             env=dict(os.environ, LD_LIBRARY_PATH=libdir, DSM_SOCKET=d.socket))
        assert run.returncode == 0, run.stdout + run.stderr
        assert "published ok version 1 value 42" in run.stdout
        ctl = subprocess.run([staged_path(destdir, opts, opts["bindir"], "dsmctl"),
                              "--socket", d.socket, "areas"],
                             capture_output=True, text=True, timeout=30)
        assert ctl.returncode == 0, ctl.stderr
    finally:
        d.stop()


def test_staged_python_package_imports_and_works(staged, dsmd):
    destdir, opts = staged
    inits = glob.glob(os.path.join(destdir + opts["prefix"], "**", "libdsm", "__init__.py"),
                      recursive=True)
    assert len(inits) == 1
    site = os.path.dirname(os.path.dirname(inits[0]))
    # Where this interpreter looks for packages under the prefix, if it does:
    # `python3 -c "import libdsm"` works after `meson install` with no PYTHONPATH.
    prefix = opts["prefix"].rstrip("/") + "/"
    if any(p.startswith(prefix) for p in sys.path):
        assert site[len(destdir):] in sys.path
    libdir = staged_path(destdir, opts, opts["libdir"])
    code = (
        "import libdsm, numpy as np\n"
        "print(libdsm.__file__)\n"
        "print([l.split()[-1] for l in open('/proc/self/maps') if 'libdsm.so' in l][0])\n"
        f"w = libdsm.Session(socket={dsmd.socket!r}).alloc('install/py', 8, np.float64)\n"
        "w.array[:] = 2\n"
        "print(w.publish(), w.version)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/",
                         env=dict(os.environ, PYTHONPATH=site, LD_LIBRARY_PATH=libdir))
    assert out.returncode == 0, out.stderr
    module, library, result = out.stdout.splitlines()
    assert module.startswith(destdir)  # the staged package, not the build tree's
    assert library.startswith(destdir)
    assert result == "True 1"
