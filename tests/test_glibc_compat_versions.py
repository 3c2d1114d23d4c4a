"""scripts/glibc_compat_versions.py, which lets the manylinux_2_28 wheel vendor Debian 11's
libraries: their libm calls of GLIBC_2.29 (exp, exp2, log, log2, pow) bound to the
GLIBC_2.2.5 versions that glibc 2.28 has, and nothing else touched or accepted."""
import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/glibc_compat_versions.py"


def shared_library(tmp_path, name, source):
    (tmp_path / f"{name}.c").write_text(source)
    out = tmp_path / f"lib{name}.so"
    # -fno-builtin: calls, not constants, whatever the arguments.
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-fno-builtin", tmp_path / f"{name}.c",
                    "-o", out, "-lm"], check=True)
    return out


def versions(path):
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1]: line.split()[-2].strip("()") for line in out.splitlines()
            if "*UND*" in line and "GLIBC_" in line}


def retarget(source, target):
    return subprocess.run([sys.executable, SCRIPT, source, target], capture_output=True,
                          text=True)


MATH = """#include <math.h>
double f(double x, double y) { return pow(x, y) + log(x) + exp(y) + log2(x) + exp2(y) + sin(x); }
"""


def test_the_five_libm_calls_are_bound_to_glibc_2_2_5_and_give_the_same_results(tmp_path):
    lib = shared_library(tmp_path, "math", MATH)
    before = versions(lib)
    # This machine's glibc (2.36) is past 2.29: the five ask for the new versions.
    assert {before[f] for f in ("exp", "exp2", "log", "log2", "pow")} == {"GLIBC_2.29"}, before
    out = tmp_path / "libmath_228.so"
    done = retarget(lib, out)
    assert done.returncode == 0, done.stderr
    after = versions(out)
    assert after == {**before, **{f: "GLIBC_2.2.5" for f in ("exp", "exp2", "log", "log2", "pow")}}
    check = subprocess.run([sys.executable, SCRIPT, "--check", out], capture_output=True,
                           text=True)
    assert check.returncode == 0 and "glibc 2.28 is enough" in check.stdout, check.stdout
    # The library loads, and the 2.2.5 versions compute what the new ones do.
    results = []
    for path in (lib, out):
        f = ctypes.CDLL(str(path)).f
        f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double, ctypes.c_double]
        results.append([f(x, y) for x, y in [(2.0, 3.0), (0.5, -7.25), (1e-3, 40.0)]])
    assert results[0] == results[1]
    assert len(out.read_bytes()) == len(lib.read_bytes())


def test_a_library_asking_for_anything_else_past_2_28_is_refused_untouched(tmp_path):
    lib = shared_library(tmp_path, "spawn", """#define _GNU_SOURCE
#include <math.h>
#include <spawn.h>
int g(posix_spawn_file_actions_t* a) { return posix_spawn_file_actions_addchdir_np(a, "/"); }
double h(double x) { return pow(x, 2.5); }
""")
    out = tmp_path / "libspawn_228.so"
    done = retarget(lib, out)
    assert done.returncode == 1
    assert "GLIBC_2.29 is needed from libc.so.6, not libm" in done.stderr, done.stderr
    assert not out.exists()


def test_a_library_with_nothing_past_2_28_is_copied_as_it_is(tmp_path):
    lib = shared_library(tmp_path, "sine",
                         "#include <math.h>\ndouble s(double x) { return sin(x); }\n")
    out = tmp_path / "libsine_228.so"
    assert retarget(lib, out).returncode == 0
    assert out.read_bytes() == lib.read_bytes()


@pytest.mark.parametrize("data", [b"", b"\x7fELF\x01\x01", b"not an ELF file at all"])
def test_what_is_not_a_64_bit_elf_file_is_refused(tmp_path, data):
    path = tmp_path / "bad.so"
    path.write_bytes(data)
    done = retarget(path, tmp_path / "out.so")
    assert done.returncode == 1 and "not a 64-bit little-endian ELF file" in done.stderr
