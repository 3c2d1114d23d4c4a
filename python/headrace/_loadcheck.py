"""Why the C++ extension cannot load, in words: the glibc a vendored library needs.

A wheel's libraries (the extension, the command line and what auditwheel vendored into
headrace.libs/) are built against one glibc; installed where the glibc is older (pip was
forced, site-packages copied from a newer machine, an old base image), the dynamic
loader refuses the first one that needs a newer symbol version and Python says only
`ImportError: ... version 'GLIBC_2.36' not found`. `explain` reads the GLIBC_x.y
versions each of those ELF files needs (their .gnu.version_r section) and compares them
with the running glibc (`os.confstr('CS_GNU_LIBC_VERSION')`).
"""
import os
import struct
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_SHT_GNU_VERNEED = 0x6FFFFFFE


def _version(text):
    return tuple(int(part) for part in text.split("."))


def glibc_needs(path):
    """The GLIBC_x.y versions an ELF file needs, as 'x.y' strings ([] if not ELF).
    Reads the ELF header, the section headers and the version-needs section only."""
    with open(path, "rb") as f:
        def read(offset, size):
            f.seek(offset)
            return f.read(size)

        header = read(0, 64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:  # ELF64 LE only
            return []
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        table = read(shoff, shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize)
                    for i in range(shnum)]
        needs = set()
        for _, kind, _, _, offset, size, link, count, _, _ in sections:
            if kind != _SHT_GNU_VERNEED:
                continue
            data = read(offset, size)
            strings = read(sections[link][4], sections[link][5])
            entry = 0
            for _ in range(count):  # Elf64_Verneed entries, each with its Elf64_Vernaux
                _, aux_count, _, aux, following = struct.unpack_from("<HHIII", data, entry)
                at = entry + aux
                for _ in range(aux_count):
                    _, _, _, name, aux_next = struct.unpack_from("<IHHII", data, at)
                    version = strings[name:strings.index(b"\0", name)].decode()
                    if version.startswith("GLIBC_") and version[6:].replace(".", "").isdigit():
                        needs.add(version[6:])
                    at += aux_next
                entry += following
    return sorted(needs, key=_version)


def running_glibc():
    """The running glibc's version ('2.36'), or None (not glibc: musl, ...)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, version = text.partition(" ")
    return version if name == "glibc" and version else None


def package_libraries():
    """The ELF files the package loads: the extension, the CLI, the Arrow bridges and
    headrace.libs/."""
    files = [p for p in _PACKAGE.glob("_headrace*.so")]
    files += [p for p in (_PACKAGE / "bin").glob("*") if p.is_file()]
    files += sorted((_PACKAGE / "arrow").glob("headrace_arrow_*.so"))
    libs = _PACKAGE.parent / "headrace.libs"
    if libs.is_dir():
        files += sorted(p for p in libs.iterdir() if ".so" in p.name)
    return files


def explain(error, glibc=None, files=None):
    """A message naming the libraries whose glibc needs this system's glibc does not
    meet, or None when every one is met (the error, if any, has another cause)."""
    have = glibc if glibc is not None else running_glibc()
    if have is None:
        if not sys.platform.startswith("linux"):
            return None
        return ("headrace's wheel is built for glibc-based Linux (manylinux), and this "
                "system's C library is not glibc (musl?); build it from source (README.md)")
    too_new = []
    for path in files if files is not None else package_libraries():
        try:
            needs = glibc_needs(path)
        except (OSError, struct.error, ValueError, IndexError):
            continue
        if needs and _version(needs[-1]) > _version(have):
            too_new.append((_version(needs[-1]), needs[-1], Path(path).name))
    if not too_new:
        return None
    too_new.sort(reverse=True)
    _, need, _ = too_new[0]
    names = ", ".join(f"{name} needs GLIBC_{version}" for _, version, name in too_new[:3])
    more = f" and {len(too_new) - 3} more" if len(too_new) > 3 else ""
    cause = f" (the loader said: {error})" if error is not None else ""
    return (f"cannot load headrace's C++ libraries: this system has glibc {have}, and "
            f"{names}{more}; this wheel needs glibc {need} or newer{cause}. Install it on a "
            "newer distribution (docs/wheels.md) or build from "
            "source with `make build`.")
