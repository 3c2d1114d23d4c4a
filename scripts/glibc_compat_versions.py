#!/usr/bin/env python3
"""Points a shared library's libm references of GLIBC_2.29 back at GLIBC_2.2.5, so that it
loads on glibc 2.28 (manylinux_2_28: RHEL/Rocky/Alma 8).

    scripts/glibc_compat_versions.py IN OUT     # writes OUT; exit 1 (and no OUT) if it cannot
    scripts/glibc_compat_versions.py --check FILE...   # prints what each needs past 2.28

Why: glibc 2.29 gave exp, exp2, log, log2 and pow new versions without the old SVID error
handling (the results are the same; only how a domain error reaches matherr changed), and
kept the old ones as GLIBC_2.2.5 compatibility symbols, which every glibc since still
exports. Anything compiled against glibc 2.29+ headers asks for the new ones: the Debian 11
libraries scripts/build_wheel_manylinux.sh vendors (libpng, libwebp, libtiff, Leptonica,
Tesseract, libxml2, libexif, ...) ask for nothing else past 2.28. Rebuilding a dozen
libraries from source for five functions would take most of a wheel build; what the
libraries compiled here ask for is set at compile time instead (scripts/glibc_2_28.h).

How: in the ELF's version-needed section (.gnu.version_r) the libm.so.6 entry naming
GLIBC_2.29 is renamed GLIBC_2.2.5 (its hash and its name's offset in .dynstr, where
GLIBC_2.2.5 already is). Its index is unchanged, so the symbols that carried it now bind to
the 2.2.5 versions. Refused (exit 1, the file untouched) when a symbol other than those
five carries that version, when the entry belongs to another library, or when .dynstr
has no GLIBC_2.2.5 to point at. Nothing else in the file moves.
"""
import re
import shutil
import struct
import subprocess
import sys

SHT_DYNSYM, SHT_GNU_VERSYM, SHT_GNU_VERNEED = 11, 0x6fffffff, 0x6ffffffe
COMPAT = {"exp", "exp2", "log", "log2", "pow"}
NEW, OLD = b"GLIBC_2.29", b"GLIBC_2.2.5"


def elf_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def cstr(data, offset):
    return data[offset:data.index(b"\0", offset)]


def sections(data):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        out.append({"type": kind, "offset": offset, "size": size, "link": link,
                    "entsize": entsize})
    return out


def retarget(data: bytearray) -> int:
    """Renames libm's GLIBC_2.29 need in `data`; returns how many symbols it covers (0:
    nothing to do). ValueError says why it cannot."""
    secs = sections(data)
    verneed = next((s for s in secs if s["type"] == SHT_GNU_VERNEED), None)
    versym = next((s for s in secs if s["type"] == SHT_GNU_VERSYM), None)
    dynsym = next((s for s in secs if s["type"] == SHT_DYNSYM), None)
    if verneed is None or versym is None or dynsym is None:
        return 0
    strtab = secs[verneed["link"]]
    strings = data[strtab["offset"]:strtab["offset"] + strtab["size"]]
    # Walk the needs: (file, aux offset in data, its name, its index).
    entries, at = [], verneed["offset"]
    while True:
        _, count, file_name, aux, nxt = struct.unpack_from("<HHIII", data, at)
        a = at + aux
        for _ in range(count):
            _, _, other, name, anext = struct.unpack_from("<IHHII", data, a)
            entries.append((bytes(cstr(strings, file_name)), a, bytes(cstr(strings, name)),
                            other))
            a += anext
        if nxt == 0:
            break
        at += nxt
    targets = [e for e in entries if e[2] == NEW]
    if not targets:
        return 0
    for file_name, _, _, _ in targets:
        if file_name != b"libm.so.6":
            raise ValueError(f"{NEW.decode()} is needed from {file_name.decode()}, not libm")
    # The symbols each renamed entry covers must be the five with 2.2.5 versions.
    names = secs[dynsym["link"]]
    covered = 0
    indices = {other for _, _, _, other in targets}
    for i in range(dynsym["size"] // dynsym["entsize"]):
        st_name, = struct.unpack_from("<I", data, dynsym["offset"] + i * dynsym["entsize"])
        index, = struct.unpack_from("<H", data, versym["offset"] + 2 * i)
        if index & 0x7FFF in indices:
            name = bytes(cstr(data, names["offset"] + st_name)).decode()
            if name not in COMPAT:
                raise ValueError(f"{name}@{NEW.decode()} has no {OLD.decode()} version")
            covered += 1
    old = re.search(rb"(?:^|\0)" + re.escape(OLD) + rb"\0", bytes(strings))
    if old is None:
        raise ValueError(f"its .dynstr holds no {OLD.decode()} to point at")
    old_offset = old.start() + (1 if strings[old.start()] == 0 else 0)
    for _, a, _, _ in targets:
        struct.pack_into("<I", data, a, elf_hash(OLD))
        struct.pack_into("<I", data, a + 8, old_offset)
    return covered


def needs_past_2_28(path):
    """The GLIBC_ versions past 2.28 `path` asks for, by objdump -T (binutils)."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True,
                         check=True).stdout
    found = set(re.findall(r"GLIBC_2\.(\d+)", out))
    return sorted(f"GLIBC_2.{v}" for v in found if int(v) > 28)


def main(argv):
    if argv[:1] == ["--check"]:
        bad = 0
        for path in argv[1:]:
            needs = needs_past_2_28(path)
            bad += bool(needs)
            print(f"{path}: {' '.join(needs) if needs else 'glibc 2.28 is enough'}")
        return 1 if bad else 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, target = argv
    data = bytearray(open(source, "rb").read())
    try:
        covered = retarget(data)
    except (ValueError, struct.error) as e:  # struct.error: a table past the file's end
        print(f"glibc_compat_versions: {source}: {e}", file=sys.stderr)
        return 1
    if covered == 0:
        shutil.copyfile(source, target)
    else:
        with open(target, "wb") as f:
            f.write(data)
        shutil.copymode(source, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
