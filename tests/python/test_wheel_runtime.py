"""What the installed wheel relies on at run time, checked without building a wheel.

- `import headrace` where a vendored library needs a newer glibc than the system's fails
  with a message naming the library, the GLIBC version it needs and the system's glibc
  (python/headrace/_loadcheck.py), not the loader's bare line. Simulated here: the
  extension's import is made to fail and the running glibc is reported as 2.17; the
  version needs are the real ones of the installed extension's ELF file.
- The data files the wheel ships are found through TESSDATA_PREFIX / HEADRACE_FONT, and a
  user's own setting wins (python/headrace/_cli.py).
`make test-wheel` (tests/wheel/) runs the real wheel in a root file system of its own.
"""
import os
import subprocess
import sys
from pathlib import Path

import headrace
from headrace import _cli, _loadcheck

EXTENSION = Path(headrace._headrace.__file__)


def test_reads_the_glibc_versions_an_elf_file_needs():
    needs = _loadcheck.glibc_needs(EXTENSION)
    assert needs, "the extension needs some GLIBC_x.y symbol versions"
    assert needs == sorted(needs, key=lambda v: tuple(map(int, v.split("."))))
    assert all(v.startswith("2.") for v in needs)
    assert _loadcheck.glibc_needs(Path(_loadcheck.__file__)) == []  # not an ELF file


def test_running_glibc_is_this_systems():
    assert _loadcheck.running_glibc() == os.confstr("CS_GNU_LIBC_VERSION").split()[1]


def test_explains_a_library_that_needs_a_newer_glibc():
    need = _loadcheck.glibc_needs(EXTENSION)[-1]
    message = _loadcheck.explain(ImportError("version `GLIBC_X' not found"), glibc="2.17",
                                 files=[EXTENSION])
    assert f"this system has glibc 2.17, and {EXTENSION.name} needs GLIBC_{need}" in message
    assert f"needs glibc {need} or newer" in message
    assert "version `GLIBC_X' not found" in message  # the loader's own words, kept
    # Met needs: nothing to explain (the import failed for another reason).
    assert _loadcheck.explain(None, glibc="99.0", files=[EXTENSION]) is None


def test_not_glibc_is_named():
    def no_glibc(name):
        raise ValueError(name)

    original = os.confstr
    os.confstr = no_glibc
    try:
        assert _loadcheck.running_glibc() is None
        assert "not glibc" in _loadcheck.explain(ImportError("x"), files=[EXTENSION])
    finally:
        os.confstr = original


def test_import_headrace_on_a_too_old_glibc_names_the_library():
    """The whole path: `import headrace` in a fresh interpreter whose extension import
    fails and whose glibc reads as 2.17."""
    code = """
import importlib.abc, os, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "headrace._headrace":
            raise ImportError("/x/headrace.libs/libfoo.so: version `GLIBC_2.99' not found")
sys.meta_path.insert(0, Refuse())
os.confstr = lambda name: "glibc 2.17"
try:
    import headrace
except ImportError as e:
    print(e)
    sys.exit(3)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 3, run.stderr
    assert "this system has glibc 2.17" in run.stdout
    # The library that needs the newest glibc is named: the extension itself in a source
    # install, a vendored one of headrace.libs/ in the wheel.
    needs = {p.name: _loadcheck.glibc_needs(p)[-1] for p in _loadcheck.package_libraries()
             if _loadcheck.glibc_needs(p)}
    top = max(needs.values(), key=lambda v: tuple(map(int, v.split("."))))
    assert any(f"{name} needs GLIBC_{top}" in run.stdout for name, v in needs.items() if v == top)
    assert f"this wheel needs glibc {top} or newer" in run.stdout
    assert "GLIBC_2.99' not found" in run.stdout


def test_bundled_data_is_found_and_the_users_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(_cli, "_HERE", tmp_path)
    monkeypatch.setattr(_cli, "pyarrow_folder", lambda: None)  # the next test's part
    assert _cli.bundled_environment() == {}  # a source install ships neither
    (tmp_path / "share" / "tessdata").mkdir(parents=True)
    (tmp_path / "share" / "fonts").mkdir()
    (tmp_path / "share" / "fonts" / "DejaVuSans.ttf").write_bytes(b"")
    assert _cli.bundled_environment() == {
        "TESSDATA_PREFIX": str(tmp_path / "share" / "tessdata"),
        "HEADRACE_FONT": str(tmp_path / "share" / "fonts" / "DejaVuSans.ttf")}
    # A stand-in environment: the process's own stays as it was for the tests after this.
    environ = {"TESSDATA_PREFIX": "/mine"}
    monkeypatch.setattr(os, "environ", environ)
    _cli.use_bundled_environment()
    assert environ == {"TESSDATA_PREFIX": "/mine",
                       "HEADRACE_FONT": str(tmp_path / "share" / "fonts" / "DejaVuSans.ttf")}


def test_the_pyarrow_python_would_import_is_the_one_the_engine_is_pointed_at(monkeypatch):
    # The C++ side reads Parquet through this pyarrow's libarrow (its Arrow bridge): the
    # folder is importlib's, found without importing pyarrow.
    import pyarrow
    folder = str(Path(pyarrow.__file__).resolve().parent)
    assert _cli.pyarrow_folder() == folder
    assert _cli.bundled_environment()["HEADRACE_PYARROW_DIR"] == folder
    monkeypatch.setattr(sys, "path", [])  # nothing to find it in
    monkeypatch.delitem(sys.modules, "pyarrow")
    assert _cli.pyarrow_folder() is None
