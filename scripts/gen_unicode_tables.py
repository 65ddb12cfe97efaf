#!/usr/bin/env python3
"""Generates core/text/unicode_tables.inc: the code point ranges of Unicode general
categories L* (letters) and N* (numbers) and of the White_Space property, as used by
the byte-level BPE pre-tokenizers (core/text/unicode.cpp) for \\p{L}, \\p{N} and \\s;
and core/text/unicode_punct.inc: the ranges of general category P* (\\p{P}, used by
llama.cpp's "default" pre-tokenizer).

Data source, first found:
  1. UnicodeData.txt + PropList.txt in --ucd DIR (default /usr/share/unicode, Debian's
     package unicode-data: `apt-get install unicode-data`);
  2. python3's own unicodedata module (its Unicode version; White_Space is then the
     stable list below, checked against str.isspace()).

usage: python3 scripts/gen_unicode_tables.py [--ucd DIR] [--out FILE] [--punct-out FILE]
"""
import argparse
import os
import sys

LETTER, NUMBER, SPACE = 1, 2, 3
MAX_CP = 0x10FFFF


def from_ucd(ucd):
    """(version, {cp: class}) from UnicodeData.txt and PropList.txt."""
    cls = {}
    punct = set()
    first = None
    with open(os.path.join(ucd, "UnicodeData.txt"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            if len(fields) < 3:
                continue
            cp, name, cat = int(fields[0], 16), fields[1], fields[2]
            c = LETTER if cat.startswith("L") else NUMBER if cat.startswith("N") else 0
            if name.endswith(", First>"):
                first = cp
                continue
            lo = first if name.endswith(", Last>") else cp
            first = None
            if c:
                for x in range(lo, cp + 1):
                    cls[x] = c
            if cat.startswith("P"):
                punct.update(range(lo, cp + 1))
    n_space = 0
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            rng, prop = (s.strip() for s in line.split(";"))
            if prop != "White_Space":
                continue
            a, _, b = rng.partition("..")
            lo, hi = int(a, 16), int(b or a, 16)
            for x in range(lo, hi + 1):
                assert x not in cls, hex(x)
                cls[x] = SPACE
                n_space += 1
    assert n_space >= 25, "PropList.txt has no White_Space entries"
    version = "?"
    readme = os.path.join(ucd, "ReadMe.txt")
    derived_age = os.path.join(ucd, "DerivedAge.txt")
    if os.path.exists(derived_age):
        with open(derived_age, encoding="utf-8") as f:
            head = f.readline()  # "# DerivedAge-15.0.0.txt"
            if "-" in head:
                version = head.split("-", 1)[1].rsplit(".txt", 1)[0]
    elif os.path.exists(readme):
        version = "see " + readme
    return version, cls, punct


# White_Space (PropList.txt), unchanged since Unicode 6.3.
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
               (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
               (0x3000, 0x3000)]


def from_python():
    import unicodedata
    cls = {}
    punct = set()
    for cp in range(MAX_CP + 1):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "P":
            punct.add(cp)
        if cat[0] == "L":
            cls[cp] = LETTER
        elif cat[0] == "N":
            cls[cp] = NUMBER
    ws = {x for lo, hi in WHITE_SPACE for x in range(lo, hi + 1)}
    # str.isspace() = bidi WS/B/S or Zs: White_Space plus U+001C..U+001F.
    isspace = {cp for cp in range(MAX_CP + 1) if chr(cp).isspace()}
    assert isspace - ws == set(range(0x1C, 0x20)) and ws <= isspace, "White_Space list is out of date"
    for x in ws:
        cls[x] = SPACE
    return unicodedata.unidata_version, cls, punct


def ranges(cls):
    out = []
    for cp in sorted(cls):
        c = cls[cp]
        if out and out[-1][1] == cp - 1 and out[-1][2] == c:
            out[-1][1] = cp
        else:
            out.append([cp, cp, c])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ucd", default="/usr/share/unicode")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "core", "text", "unicode_tables.inc"))
    ap.add_argument("--punct-out", default=os.path.join(here, "..", "core", "text", "unicode_punct.inc"))
    args = ap.parse_args()
    if os.path.exists(os.path.join(args.ucd, "UnicodeData.txt")) and os.path.exists(
            os.path.join(args.ucd, "PropList.txt")):
        version, cls, punct = from_ucd(args.ucd)
        source = "UnicodeData.txt and PropList.txt (Unicode %s)" % version
    else:
        version, cls, punct = from_python()
        source = "python3 unicodedata (Unicode %s); White_Space from the stable list" % version
    rs = ranges(cls)
    names = {LETTER: "kLetter", NUMBER: "kNumber", SPACE: "kSpace"}
    lines = [
        "// Generated by scripts/gen_unicode_tables.py from %s. Do not edit." % source,
        "// Sorted, disjoint code point ranges {first, last, class}: kLetter = general category",
        "// L*, kNumber = N*, kSpace = the White_Space property. Included by unicode.cpp.",
        "// %d ranges." % len(rs),
        "",
    ]
    row = []
    for lo, hi, c in rs:
        row.append("{0x%X, 0x%X, %s}," % (lo, hi, names[c]))
        if len(row) == 3:
            lines.append(" ".join(row))
            row = []
    if row:
        lines.append(" ".join(row))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d ranges from %s" % (args.out, len(rs), source), file=sys.stderr)
    write_punct(args.punct_out, punct, source)


def write_punct(path, punct, source):
    """The ranges of general category P* as {first, last} rows."""
    rs = ranges({cp: 1 for cp in punct})
    lines = [
        "// Generated by scripts/gen_unicode_tables.py from %s. Do not edit." % source,
        "// Sorted, disjoint code point ranges {first, last} of general category P* (punctuation).",
        "// Included by unicode.cpp.",
        "// %d ranges." % len(rs),
        "",
    ]
    row = []
    for lo, hi, _ in rs:
        row.append("{0x%X, 0x%X}," % (lo, hi))
        if len(row) == 4:
            lines.append(" ".join(row))
            row = []
    if row:
        lines.append(" ".join(row))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d ranges from %s" % (path, len(rs), source), file=sys.stderr)


if __name__ == "__main__":
    main()
