#!/usr/bin/env python3
"""Generates src/headrace/ops/text/unicode_tables.inc: the Unicode data in which
text.tokenize's libraries (PCRE2 10.42: Unicode 14; utf8proc 2.8: Unicode 15) differ
from the reference, the `tokenizers` package (requirements-dev.txt), whose split regexes
run on Oniguruma (Unicode 16 here) and whose normalizers on the unicode-normalization
crate's older tables. Every fact is measured on the reference itself, code point by
code point, so the tables are exactly its behaviour, whatever Unicode version it states:

  kRegexSubstitutes  code points whose general category or \\s membership differs
                     between PCRE2 and the reference, each with a substitute: a code
                     point of the same UTF-8 length that both classify as the
                     reference classifies the original. The split regexes run on the
                     text with these substituted (offsets unchanged).
  kCombiningClasses  the reference's nonzero canonical combining classes.
  kInertInNormalization  code points utf8proc decomposes or composes and the reference
                     leaves alone (unknown to its tables): normalization copies them.

Usage: python scripts/gen_text_unicode_tables.py (needs gcc, libpcre2-dev,
libutf8proc-dev; runs scripts/text_unicode_probe.c). About a minute.
"""
import pathlib
import subprocess
import sys
import tempfile

from tokenizers import Regex, normalizers, pre_tokenizers

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "src/headrace/ops/text/unicode_tables.inc"
CATS = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
        "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co",
        "Cn"]
# Characters a caseless ASCII literal matches ((?i:'s) matches "'ſ"): never substitutes.
CASE_FOLDS_TO_ASCII = {0x17F, 0x212A, 0x130, 0x131}
CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def probe_libraries():
    with tempfile.TemporaryDirectory() as d:
        exe = pathlib.Path(d) / "probe"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "scripts/text_unicode_probe.c"),
                        "-lpcre2-8", "-lutf8proc"], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    lib = {}
    for line in out.splitlines():
        f = line.split(" ")
        forms = [tuple(int(x, 16) for x in s.split(".")) for s in f[4:8]]
        lib[int(f[0], 16)] = (int(f[1]), int(f[2]), int(f[3]), forms)
    return lib


def matched(pattern, text):
    """Indexes (code points of `text`) the reference's regex matches, one char each."""
    pieces = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
    keep = bytearray(b"\x01") * len(text)
    for _, (s, e) in pieces:
        keep[s:e] = b"\x00" * (e - s)
    return keep


def probe_reference():
    text = "".join(map(chr, CPS))
    cat = [len(CATS) - 1] * len(CPS)
    for k, name in enumerate(CATS[:-1]):
        m = matched(r"\p{%s}" % name, text)
        for i, v in enumerate(m):
            if v:
                cat[i] = k
    ws = matched(r"\s", text)
    return {cp: (cat[i], ws[i]) for i, cp in enumerate(CPS)}


def reference_forms():
    cps = [cp for cp in CPS if cp != 0x0A]  # "\n" separates them: copied by every form
    text = "\n".join(map(chr, cps))
    out = []
    for norm in (normalizers.NFD(), normalizers.NFKD(), normalizers.NFC(), normalizers.NFKC()):
        out.append([tuple(map(ord, s)) for s in norm.normalize_str(text).split("\n")])
    forms = {cp: [out[f][i] for f in range(4)] for i, cp in enumerate(cps)}
    forms[0x0A] = [(0x0A,)] * 4
    return forms


def reference_nonzero_ccc(candidates):
    """Of `candidates` (utf8proc says ccc > 0), those the reference reorders: after
    U+0301 (230) a mark of a lower nonzero class moves before it; before U+0334 (1) a
    mark of a higher class moves after it."""
    nfd = normalizers.NFD()
    a = nfd.normalize_str("\n".join("\u0301" + chr(c) for c in candidates)).split("\n")
    b = nfd.normalize_str("\n".join(chr(c) + "\u0334" for c in candidates)).split("\n")
    return {c for c, x, y in zip(candidates, a, b)
            if not x.startswith("\u0301") or y.startswith("\u0334")}


def ranges(items):
    """[(cp, value)] sorted by cp -> [(lo, hi, value)] of consecutive runs."""
    out = []
    for cp, v in items:
        if out and out[-1][1] == cp - 1 and out[-1][2] == v:
            out[-1][1] = cp
        else:
            out.append([cp, cp, v])
    return out


def main():
    lib = probe_libraries()
    ref = probe_reference()
    # Substitutes: the lowest non-ASCII code point of each (class, \s, length) on which
    # PCRE2 and the reference agree.
    def length(cp):
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    rep = {}
    for cp in CPS:
        if cp < 0x80 or cp in CASE_FOLDS_TO_ASCII or 0xE000 <= cp <= 0xF8FF:
            continue
        key = (ref[cp], length(cp))
        if (lib[cp][0], lib[cp][1]) == ref[cp] and key not in rep:
            rep[key] = cp
    subs = []
    for cp in CPS:
        if (lib[cp][0], lib[cp][1]) != ref[cp]:
            key = (ref[cp], length(cp))
            if key not in rep:
                sys.exit(f"no substitute for U+{cp:04X} {key}")
            subs.append((cp, rep[key]))
    # Substitutes as ranges: a run of code points sharing a substitute.
    sub_ranges = ranges(subs)

    candidates = [cp for cp in CPS if lib[cp][2] > 0]
    nonzero = reference_nonzero_ccc(candidates)
    ccc = ranges([(cp, lib[cp][2]) for cp in candidates if cp in nonzero])
    forms = reference_forms()
    inert = []
    for cp in CPS:
        if forms[cp] != lib[cp][3]:
            if any(f != (cp,) for f in forms[cp]):
                sys.exit(f"U+{cp:04X}: the reference normalizes it ({forms[cp]}) unlike "
                         f"utf8proc ({lib[cp][3]}); not an unknown character")
            inert.append((cp, 0))
    # A code point the reference gives class 0 while utf8proc does not is inert too.
    for cp in candidates:
        if cp not in nonzero:
            inert.append((cp, 0))
    inert = ranges(sorted(set(inert)))

    with OUT.open("w") as f:
        f.write("// Generated by scripts/gen_text_unicode_tables.py from the `tokenizers` package\n"
                "// (the reference) against PCRE2 10.42 and utf8proc 2.8. Do not edit.\n"
                f"// {len(subs)} code points substituted for the split regexes, "
                f"{sum(h - l + 1 for l, h, _ in ccc)} with a nonzero\n// combining class, "
                f"{sum(h - l + 1 for l, h, _ in inert)} inert in normalization.\n\n")
        f.write("constexpr UnicodeRange kRegexSubstitutes[] = {\n")
        for lo, hi, r in sub_ranges:
            f.write(f"    {{0x{lo:X}, 0x{hi:X}, 0x{r:X}}},\n")
        f.write("};\n\nconstexpr UnicodeRange kCombiningClasses[] = {\n")
        for lo, hi, c in ccc:
            f.write(f"    {{0x{lo:X}, 0x{hi:X}, {c}}},\n")
        f.write("};\n\nconstexpr UnicodeRange kInertInNormalization[] = {\n")
        for lo, hi, _ in inert:
            f.write(f"    {{0x{lo:X}, 0x{hi:X}, 0}},\n")
        f.write("};\n")
    print(f"{OUT}: {len(subs)} substituted ({len(sub_ranges)} ranges), "
          f"{len(ccc)} class ranges, {len(inert)} inert ranges")


if __name__ == "__main__":
    main()
