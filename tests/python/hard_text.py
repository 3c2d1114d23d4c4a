"""Hard strings for a tokenizer (issue 25): every script, the Unicode 15-16 additions,
combining marks in and out of canonical order, NFD input, whitespace runs (U+180E
included), the tokenizer's special-token text, caseless contractions and invalid UTF-8.

hard_strings(n, seed, specials) -> n byte strings, deterministic for a seed.
"""
import random
import unicodedata

# Blocks of scripts in use, (first, last) code point.
SCRIPTS = [
    (0x0041, 0x024F), (0x0370, 0x03FF), (0x0400, 0x052F), (0x0531, 0x058A), (0x0591, 0x05F4),
    (0x0600, 0x06FF), (0x0700, 0x074F), (0x0780, 0x07B1), (0x07C0, 0x07FF), (0x0800, 0x089F),
    (0x0900, 0x097F), (0x0980, 0x09FE), (0x0A00, 0x0A76), (0x0A81, 0x0AFF), (0x0B01, 0x0B77),
    (0x0B82, 0x0BFA), (0x0C00, 0x0C7F), (0x0C80, 0x0CF3), (0x0D00, 0x0D7F), (0x0D81, 0x0DF4),
    (0x0E01, 0x0E5B), (0x0E81, 0x0EDF), (0x0F00, 0x0FDA), (0x1000, 0x109F), (0x10A0, 0x10FF),
    (0x1100, 0x11FF), (0x1200, 0x139F), (0x13A0, 0x13FD), (0x1400, 0x167F), (0x1680, 0x169C),
    (0x16A0, 0x16F8), (0x1780, 0x17F9), (0x1800, 0x18AA), (0x1900, 0x19DF), (0x1A00, 0x1AFF),
    (0x1B00, 0x1BFF), (0x1C00, 0x1CFF), (0x1D00, 0x1DFF), (0x1E00, 0x1FFF), (0x2000, 0x2BFF),
    (0x2C00, 0x2E5D), (0x2E80, 0x2FD5), (0x3000, 0x30FF), (0x3105, 0x31FF), (0x3200, 0x4DBF),
    (0x4E00, 0x9FFF), (0xA000, 0xA4C6), (0xA4D0, 0xA6F7), (0xA700, 0xABFF), (0xAC00, 0xD7A3),
    (0xD7B0, 0xD7FB), (0xF900, 0xFAFF), (0xFB00, 0xFDFF), (0xFE00, 0xFFFD), (0x10000, 0x1034A),
    (0x10380, 0x104FF), (0x10800, 0x10FFF), (0x11000, 0x11FFF), (0x12000, 0x1254F),
    (0x13000, 0x1342F), (0x16800, 0x16FFF), (0x17000, 0x18D08), (0x1B000, 0x1B2FB),
    (0x1D000, 0x1D7FF), (0x1E000, 0x1EFFF), (0x1F000, 0x1FAFF), (0x20000, 0x2A6DF),
    (0x2A700, 0x2EBE0), (0x30000, 0x3134A),
]
# Blocks added in Unicode 15, 15.1 and 16 (unknown to PCRE2 10.42 and Python 3.11).
NEW_BLOCKS = [
    (0x10EC0, 0x10EFF), (0x11B00, 0x11B5F), (0x11F00, 0x11F5F), (0x1D2C0, 0x1D2DF),
    (0x1E030, 0x1E08F), (0x1E4D0, 0x1E4FF), (0x31350, 0x323AF), (0x2EBF0, 0x2EE5F),
    (0x105C0, 0x105FF), (0x10D40, 0x10D8F), (0x11380, 0x113FF), (0x11BC0, 0x11BFF),
    (0x16100, 0x1613F), (0x16D40, 0x16D7F), (0x1E5D0, 0x1E5FF), (0x13460, 0x143FF),
    (0x1CC00, 0x1CEBF), (0x116D0, 0x116FF), (0x0897, 0x0897), (0x0CF3, 0x0CF3),
    (0x0ECE, 0x0ECE), (0x1C89, 0x1C8A), (0xA7CB, 0xA7DC), (0x1B4E, 0x1B7F), (0x2427, 0x2429),
    (0x31E4, 0x31E5), (0x1F8B0, 0x1F8BB), (0x1FA89, 0x1FA8F), (0x1E4EC, 0x1E4EF),
]
# Combining marks, old and new: the reference's normalizer orders only those it knows.
MARKS = (list(range(0x0300, 0x0370)) + list(range(0x0591, 0x05BE)) + list(range(0x0610, 0x061B))
         + list(range(0x064B, 0x0660)) + [0x093C, 0x094D, 0x0951, 0x0952, 0x09BC, 0x09CD]
         + list(range(0x0E31, 0x0E3B)) + list(range(0x0F71, 0x0F85)) + list(range(0x1AB0, 0x1ACF))
         + list(range(0x1DC0, 0x1E00)) + list(range(0x20D0, 0x20F1)) + list(range(0xFE20, 0xFE30))
         + list(range(0x08D3, 0x08E2)) + [0x0C3C, 0x1DFA, 0x10D69, 0x10D6A, 0x10D6D, 0x1E4EC,
                                           0x1E4EF, 0x16FF0, 0x11F41, 0x0897, 0x1E08F, 0x10EFD])
SPACES = [" ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029",
          "\u180e", "\u200b", "\u0085", "\u2000", "\u2003", "\u200a", "\u202f", "\u205f",
          "\u1680", "\ufeff", "\x0b", "\x0c", "\x1c", "\x1f"]
WORDS = ["the", "The", "HELLO", "naïve", "Straße", "İstanbul", "ſtop", "Kelvin", "ﬁne",
         "١٢٣", "१२३", "12345", "3.14159", "1,000,000", "x²", "½", "Ⅻ", "日本語", "中文",
         "한국어", "ภาษาไทย", "ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "தமிழ்",
         "ქართული", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "😀", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "def f(x):", "a->b",
         "https://x.org/a?b=c", "e\u0301", "\u1100\u1161\u11a8", "\uac00\u11a8",
         "\U0001d15f\u0958\u2adc"]  # composition exclusions: decomposed by NFC
CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'M", "'ll", "'LL", "'d",
                "'D", "'ſ", "'K", "'\u212a", "’s", "''s"]
BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\x80", b"\xf0\x9f\x98", b"\xed\xa0\x80",
             b"\xc0\xaf", b"\xfe\xfe", b"\xf4\x90\x80\x80", b"\xe0\x80\x80"]


def _char(rng, blocks):
    lo, hi = rng.choice(blocks)
    cp = rng.randint(lo, hi)
    return chr(cp) if not 0xD800 <= cp <= 0xDFFF else "?"


def _run(rng, blocks, n):
    return "".join(_char(rng, blocks) for _ in range(n))


def _marks(rng, n):
    return "".join(chr(rng.choice(MARKS)) for _ in range(n))


def _fragment(rng, specials):
    kind = rng.randrange(12)
    if kind == 0:  # a word in one script
        return _run(rng, [rng.choice(SCRIPTS)], rng.randint(1, 12))
    if kind == 1:  # characters from anywhere, separated by spaces
        return " ".join(_run(rng, SCRIPTS, rng.randint(1, 5)) for _ in range(rng.randint(1, 4)))
    if kind == 2:  # the new blocks, among letters and digits
        return "".join(rng.choice([_run(rng, NEW_BLOCKS, rng.randint(1, 4)), " ", "a", "7",
                                   rng.choice(WORDS)]) for _ in range(rng.randint(1, 6)))
    if kind == 3:  # a base and marks in random (often non-canonical) order
        base = rng.choice(["a", "e", "o", "\u05d0", "\u0627", "\u0915", " ", "\n", "1", "",
                           _char(rng, SCRIPTS)])
        return base + _marks(rng, rng.randint(1, 8))
    if kind == 4:  # NFD of ordinary text
        return unicodedata.normalize("NFD", " ".join(rng.choice(WORDS) for _ in range(3)) +
                                     _run(rng, [(0xC0, 0x24F), (0x1E00, 0x1FFF),
                                                (0xAC00, 0xD7A3)], 4))
    if kind == 5:  # whitespace runs
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 8)))
    if kind == 6:  # special-token text, whole or cut
        s = rng.choice(specials) if specials else "<|x|>"
        return s if rng.random() < 0.7 else s[:rng.randint(1, max(1, len(s) - 1))]
    if kind == 7:  # caseless contractions
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if kind == 8:  # digits and punctuation
        return "".join(rng.choice("0123456789.,;:!?()[]{}<>-_=+*/\\'\"`~@#$%^&|")
                       for _ in range(rng.randint(1, 10)))
    if kind == 9:  # arbitrary code points, unassigned and private use included
        return "".join(chr(c) if not 0xD800 <= c <= 0xDFFF else "x"
                       for c in (rng.randint(0x80, 0x10FFFF) for _ in range(rng.randint(1, 4))))
    if kind == 10:
        return rng.choice(WORDS)
    return " " + rng.choice(WORDS) + rng.choice(SPACES)


def insert_bad_bytes(rng, data: bytearray, bad=BAD_BYTES):
    """Inserts 1 to 3 invalid UTF-8 sequences from `bad` at random places of `data`."""
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(data))
        data[pos:pos] = rng.choice(bad)


def hard_strings(n, seed, specials=()):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = "".join(_fragment(rng, specials) for _ in range(rng.randint(1, 8)))
        if i % 7 == 3:
            text = unicodedata.normalize("NFD", text)
        data = bytearray(text.encode("utf-8", "surrogatepass"))
        if i % 5 == 4:
            insert_bad_bytes(rng, data)
        out.append(bytes(data))
    return out
