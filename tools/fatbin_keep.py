#!/usr/bin/env python3
"""fatbin_keep.py - blank CUDA device code for unwanted GPU archs in an ELF
shared library without moving a byte (an nvprune work-alike for .so files).

Why: a release NCCL (e.g. 2.32.3 from the nvidia-nccl-cu13 wheel) is ~344 MB,
mostly cubins for sm_75..sm_120 plus PTX. To carry it to a one-arch test box
(e.g. H100/H200 = sm_90) through a size-limited transfer, we blank (zero,
or a tiny stub + zeros, below) the payload of every fatbinary entry whose
arch is not kept. No byte moves: file
size, section offsets, ELF layout and all fatbin headers stay as they were, so
the host code, relocations and __cudaRegisterFatBinary wrappers are untouched,
the CUDA driver still sees well-formed fatbins (it only loads the entry
matching the GPU), and the long runs of zeros compress to nothing.

Usage:
  python3 tools/fatbin_keep.py IN.so OUT.so --keep 90 [--keep 90a ...]
          [--keep-ptx] [--zero] [--dry-run]

  --keep N    keep cubins for compute capability N. A bare number ("90",
              "sm_90") keeps every variant of it (sm_90, sm_90a, sm_90f);
              "90a" / "100f" keeps only that arch-/family-specific variant.
  --keep-ptx  keep ALL PTX entries (any arch); default is to blank all PTX.
  --zero      plain zero-fill of every blanked payload (see below).

How a payload is blanked. The entry header (incl. compressed/uncompressed
sizes) is never changed. For a zstd-compressed entry (flag 0x8000, what
CUDA 13 emits) the default writes, in the first compressed_size bytes, a
valid zstd frame of exactly that length that inflates to exactly
uncompressed_size bytes: a ~200-byte stub (an empty cubin: ELF header +
.shstrtab, e_flags naming the entry's arch; or a PTX comment) followed by
zeros (stored as zero raw bytes + RLE blocks); the rest of the payload is
zero. Tools that inflate every entry (cuobjdump --list-elf does, and fails
with "Uncompress failed" / "Invalid ELF" on plain zeros) keep working, and
the stub costs nothing after compression. Entries that are uncompressed, LZ4
(0x2000) or not CUDA-13-style cubins (ELF ABI != 8) are zero-filled, as is
everything with --zero. The CUDA driver picks the entry for the GPU by the
headers' arch, so blanked entries for other archs should never be loaded.

Sections scanned: .nv_fatbin, __nv_relfatbin (runtime-registered fatbins from
-rdc objects; cuobjdump does not list this one), and any other section whose
content starts with the fatbin magic.

Layout (little endian; verified on NCCL 2.32.3 and nvcc 13.0 output):
  container header, 16 bytes:
    u32 magic 0xBA55ED50, u16 version (1), u16 header_size (16),
    u64 payload_size (= sum of entries that follow)
  entry, back to back inside the container payload:
    +0x00 u16 kind (1 = PTX, 2 = ELF cubin)   +0x02 u16 version (0x0101)
    +0x04 u32 header_size (64, or 80..120 with extra fields)
    +0x08 u64 payload_size (padded; payload follows the header)
    +0x10 u32 compressed_size  +0x14 u32 unknown
    +0x18 u16 minor  +0x1a u16 major (PTX ISA version for PTX)
    +0x1c u32 arch (e.g. 90)   +0x20 u32 name_offset  +0x24 u32 name_len
    +0x28 u64 flags: 0x1 64-bit, 0x10 linux, 0x2000/0x8000 compressed
          (LZ4/zstd), 0x100000 arch-specific "a", 0x200000 family "f"
    +0x30 u64 zero  +0x38 u64 uncompressed_size
Only the payload_size bytes after each entry header are rewritten. The script
refuses (exit 2, nothing written) if anything fails to parse consistently.
"""

import argparse
import collections
import mmap
import os
import shutil
import struct
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
WRAPPER_MAGIC = 0x466243B1          # __fatBinC_Wrapper_t in .nvFatBinSegment
KIND_PTX, KIND_ELF = 1, 2
KIND_NAMES = {KIND_PTX: "ptx", KIND_ELF: "elf"}
FLAG_COMPRESSED = 0x2000 | 0x8000
FLAG_ARCH_SPECIFIC = 0x100000       # sm_XXa
FLAG_FAMILY = 0x200000              # sm_XXXf
CONT_HDR = struct.Struct("<IHHQ")
ENTRY_HDR = struct.Struct("<HHIQIIHHIIIQQQ")   # 64 bytes
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
FLAG_ZSTD = 0x8000
ZSTD_MAGIC = 0xFD2FB528
ZSTD_BLOCK_MAX = 128 * 1024


class Refuse(Exception):
    pass


# ---------------------------------------------------------------- ELF
def read_sections(d):
    if d[:4] != b"\x7fELF":
        raise Refuse("not an ELF file")
    if d[4] != 2 or d[5] != 1:
        raise Refuse("only 64-bit little-endian ELF is supported")
    (e_shoff,) = struct.unpack_from("<Q", d, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    if e_shoff == 0 or e_shentsize != 64 or e_shnum == 0:
        raise Refuse("ELF has no usable section header table")
    if e_shoff + e_shnum * 64 > len(d):
        raise Refuse("section header table runs past end of file")
    raw = []
    for i in range(e_shnum):
        raw.append(struct.unpack_from("<IIQQQQIIQQ", d, e_shoff + i * 64))
    if e_shstrndx >= e_shnum:
        raise Refuse("bad e_shstrndx")
    stroff, strsize = raw[e_shstrndx][4], raw[e_shstrndx][5]
    secs = []
    for i, (name, typ, flags, addr, off, size, _l, _i, _a, _e) in enumerate(raw):
        if name >= strsize:
            raise Refuse("section %d name out of range" % i)
        end = d.find(b"\0", stroff + name, stroff + strsize)
        nm = bytes(d[stroff + name:end]).decode("ascii", "replace")
        secs.append(dict(idx=i, name=nm, type=typ, addr=addr, off=off, size=size))
    return secs


def file_offset_of(secs, vaddr):
    for s in secs:
        if s["type"] not in (0, 8) and s["addr"] and s["addr"] <= vaddr < s["addr"] + s["size"]:
            return s["off"] + (vaddr - s["addr"])
    return None


# ---------------------------------------------------------------- fatbin
def arch_name(kind, arch, flags):
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
    if kind == KIND_PTX:
        return "compute_%d%s" % (arch, suffix)
    if kind == KIND_ELF:
        return "sm_%d%s" % (arch, suffix)
    return "kind%d_%d%s" % (kind, arch, suffix)


def parse_section(d, sec):
    """Return list of containers: dict(off, end, entries=[...])."""
    off, end = sec["off"], sec["off"] + sec["size"]
    if end > len(d):
        raise Refuse("section %s runs past end of file" % sec["name"])
    containers = []
    while off < end:
        if end - off < CONT_HDR.size:
            if any(d[off:end]):
                raise Refuse("%s: trailing garbage at 0x%x" % (sec["name"], off))
            break
        magic, ver, hsz, psz = CONT_HDR.unpack_from(d, off)
        if magic != FATBIN_MAGIC:
            # tolerate zero padding between / after containers, nothing else
            nz = off
            while nz < end and d[nz] == 0:
                nz += 1
            if nz == off:
                raise Refuse("%s: fatbin magic missing at file offset 0x%x (found 0x%08x)"
                             % (sec["name"], off, magic))
            off = nz
            continue
        if hsz < CONT_HDR.size or off + hsz + psz > end:
            raise Refuse("%s: container at 0x%x: header %d / payload %d overrun the section"
                         % (sec["name"], off, hsz, psz))
        cend = off + hsz + psz
        entries = []
        e = off + hsz
        while e < cend:
            if cend - e < ENTRY_HDR.size:
                raise Refuse("%s: truncated entry header at 0x%x" % (sec["name"], e))
            (kind, ever, ehsz, epsz, csz, _u, minor, major, arch, noff, nlen,
             flags, _z, usz) = ENTRY_HDR.unpack_from(d, e)
            if ehsz < ENTRY_HDR.size or e + ehsz + epsz > cend:
                raise Refuse("%s: entry at 0x%x: header %d / payload %d overrun container 0x%x..0x%x"
                             % (sec["name"], e, ehsz, epsz, off, cend))
            if nlen and noff + nlen > ehsz:
                raise Refuse("%s: entry at 0x%x: name field outside header" % (sec["name"], e))
            if flags & FLAG_COMPRESSED and csz > epsz:
                raise Refuse("%s: entry at 0x%x: compressed size %d > payload %d"
                             % (sec["name"], e, csz, epsz))
            if arch == 0 or arch > 10000:
                raise Refuse("%s: entry at 0x%x: implausible arch %d" % (sec["name"], e, arch))
            entries.append(dict(off=e, kind=kind, arch=arch, flags=flags,
                                pay_off=e + ehsz, pay_size=epsz, csize=csz,
                                usize=usz, minor=minor,
                                name=arch_name(kind, arch, flags)))
            e += ehsz + epsz
        if e != cend:
            raise Refuse("%s: entries of container at 0x%x end at 0x%x, header says 0x%x"
                         % (sec["name"], off, e, cend))
        if not entries:
            raise Refuse("%s: empty container at 0x%x" % (sec["name"], off))
        containers.append(dict(off=off, end=cend, entries=entries))
        off = cend
    return containers


def find_fatbin_sections(d, secs):
    out = []
    for s in secs:
        if s["type"] in (0, 8) or s["size"] < CONT_HDR.size:   # NULL, NOBITS
            if s["name"] in FATBIN_SECTIONS and s["size"]:
                raise Refuse("section %s has no file content" % s["name"])
            continue
        starts = struct.unpack_from("<I", d, s["off"])[0] == FATBIN_MAGIC
        if s["name"] in FATBIN_SECTIONS and not starts:
            raise Refuse("section %s does not start with fatbin magic" % s["name"])
        if starts:
            out.append(s)
    return out


def check_wrappers(d, secs, container_starts):
    """Every __fatBinC_Wrapper_t in .nvFatBinSegment must point at a container
    we parsed (in-place pointer value; RELA addend is usually also written)."""
    ok = bad = unknown = 0
    for s in secs:
        if s["name"] != ".nvFatBinSegment" or s["type"] == 8:
            continue
        for p in range(s["off"], s["off"] + s["size"] - 23, 24):
            magic, _ver, data, _fn = struct.unpack_from("<IIQQ", d, p)
            if magic != WRAPPER_MAGIC:
                continue
            fo = file_offset_of(secs, data) if data else None
            if fo is None:
                unknown += 1
            elif fo in container_starts:
                ok += 1
            else:
                bad += 1
    return ok, bad, unknown


# ---------------------------------------------------------------- stubs
def empty_cubin(arch):
    """Smallest ELF cuobjdump accepts as a cubin: header + null + .shstrtab.
    e_flags in the CUDA 13 (ELF ABI 8) encoding, as nvcc 13 writes it:
    0x6000000 | arch << 8 | (0x4 below sm_100, else 0x2)."""
    shstr = b"\0.shstrtab\0".ljust(16, b"\0")
    eflags = 0x6000000 | (arch << 8) | (0x4 if arch < 100 else 0x2)
    ident = b"\x7fELF\x02\x01\x01\x41\x08".ljust(16, b"\0")
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, 190, 1, 0, 0, 64 + len(shstr),
                       eflags, 64, 56, 0, 64, 2, 1)
    shdr = bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(b"\0.shstrtab\0"),
                                   0, 0, 1, 0)
    return ehdr + shstr + shdr


def zstd_frame_exact(prefix, usize, csize):
    """A zstd frame exactly csize bytes long that inflates to prefix followed
    by zeros, usize bytes in all; None if no such frame fits."""
    # frame header as nvcc's encoder writes it: single segment (window =
    # content size) up to 2 MiB, else a 2 MiB window (log 21) + content size
    if usize < 256:
        fh = struct.pack("<IBB", ZSTD_MAGIC, 0x20, usize)
    elif usize < 65536 + 256:
        fh = struct.pack("<IBH", ZSTD_MAGIC, 0x60, usize - 256)
    elif usize <= 1 << 21:
        fh = struct.pack("<IBI", ZSTD_MAGIC, 0xA0, usize)
    elif usize < 1 << 32:
        fh = struct.pack("<IBBI", ZSTD_MAGIC, 0x80, (21 - 10) << 3, usize)
    else:
        fh = struct.pack("<IBBQ", ZSTD_MAGIC, 0xC0, (21 - 10) << 3, usize)

    def ceil(a):
        return -(-a // ZSTD_BLOCK_MAX)

    def length(raw):    # raw bytes stored verbatim, the rest as 4-byte RLE blocks
        return len(fh) + 3 * ceil(raw) + raw + 4 * ceil(usize - raw)

    raw = None
    guess = max(len(prefix), csize - len(fh))
    for _ in range(4):
        guess = max(len(prefix), min(usize, guess - (length(guess) - csize)))
    for r in range(max(len(prefix), guess - 64), min(usize, guess + 64) + 1):
        if length(r) == csize and (r or usize):
            raw = r
            break
    if raw is None:
        return None
    out = bytearray(fh)
    data = bytes(prefix) + bytes(raw - len(prefix))
    blocks = [(0, data[i:i + ZSTD_BLOCK_MAX]) for i in range(0, raw, ZSTD_BLOCK_MAX)]
    rem = usize - raw
    while rem:
        n = min(rem, ZSTD_BLOCK_MAX)
        blocks.append((1, n))
        rem -= n
    for i, (typ, v) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        if typ == 0:
            out += (last | (len(v) << 3)).to_bytes(3, "little") + v
        else:
            out += (last | (1 << 1) | (v << 3)).to_bytes(3, "little") + b"\0"
    assert len(out) == csize
    return bytes(out)


def blank_bytes(ent, zero_only):
    """(payload bytes to write, how) for a blanked entry."""
    n = ent["pay_size"]
    if not zero_only and ent["flags"] & FLAG_ZSTD and ent["usize"] and ent["csize"]:
        if ent["kind"] == KIND_ELF and ent["minor"] == 8:
            prefix = empty_cubin(ent["arch"])
        elif ent["kind"] == KIND_PTX:
            prefix = b"// payload blanked by fatbin_keep.py\n"
        else:
            prefix = None
        if prefix is not None and len(prefix) <= ent["usize"]:
            frame = zstd_frame_exact(prefix, ent["usize"], ent["csize"])
            if frame is not None:
                return frame + bytes(n - len(frame)), "stub"
    return None, "zero"


# ---------------------------------------------------------------- main
def parse_keep(specs):
    keep = []
    for k in specs:
        k0 = k.lower()
        for pre in ("sm_", "compute_"):
            if k0.startswith(pre):
                k0 = k0[len(pre):]
        suffix = k0[-1] if k0 and k0[-1] in "af" else ""
        num = k0[:-1] if suffix else k0
        if not num.isdigit():
            raise SystemExit("bad --keep value %r (want e.g. 90, 90a, sm_100f)" % k)
        keep.append((int(num), suffix))
    return keep


def is_kept(ent, keep, keep_ptx):
    if ent["kind"] == KIND_PTX:
        return keep_ptx
    if ent["kind"] != KIND_ELF:
        return True     # unknown kind: leave alone (reported)
    var = "a" if ent["flags"] & FLAG_ARCH_SPECIFIC else ("f" if ent["flags"] & FLAG_FAMILY else "")
    for num, suf in keep:
        if ent["arch"] == num and (suf == "" or suf == var):
            return True
    return False


def scan(d):
    secs = read_sections(d)
    fsecs = find_fatbin_sections(d, secs)
    if not fsecs:
        raise Refuse("no fatbin section found")
    parsed = [(s, parse_section(d, s)) for s in fsecs]
    starts = {c["off"] for _s, cs in parsed for c in cs}
    ok, bad, unknown = check_wrappers(d, secs, starts)
    if bad:
        raise Refuse("%d fatbin wrapper(s) point inside a fatbin section but not at a "
                     "parsed container start" % bad)
    return parsed, (ok, bad, unknown)


def same_outside(a, b, ranges, step=1 << 24):
    """True if a and b are equal everywhere outside the sorted (off, n) ranges."""
    pos = 0
    for off, n in sorted(ranges) + [(len(a), 0)]:
        for p in range(pos, off, step):
            q = min(off, p + step)
            if a[p:q] != b[p:q]:
                return False
        pos = off + n
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--keep", action="append", required=True,
                    help="arch to keep: 90 (all 9.0 variants), 90a, sm_100f ... (repeatable)")
    ap.add_argument("--keep-ptx", action="store_true", help="keep all PTX entries")
    ap.add_argument("--zero", action="store_true",
                    help="plain zero-fill (default: zstd stub frames where possible)")
    ap.add_argument("--dry-run", action="store_true", help="parse and summarize only")
    a = ap.parse_args()
    keep = parse_keep(a.keep)

    if os.path.exists(a.output) and os.path.samefile(a.input, a.output):
        raise SystemExit("refusing to write over the input file")
    try:
        f_in = open(a.input, "rb")
        d = mmap.mmap(f_in.fileno(), 0, access=mmap.ACCESS_READ)
        parsed, (wok, _wbad, wunk) = scan(d)
    except (Refuse, struct.error, ValueError) as ex:
        print("fatbin_keep: REFUSING: %s" % ex, file=sys.stderr)
        return 2

    # name -> [kept, blanked, bytes kept, bytes blanked]
    stats = collections.OrderedDict()
    blank = []                  # (offset, size, entry)
    how = collections.Counter()
    unknown_kinds = collections.Counter()
    for _sec, conts in parsed:
        for c in conts:
            for e in c["entries"]:
                if e["kind"] not in KIND_NAMES:
                    unknown_kinds[e["name"]] += 1
                st = stats.setdefault(e["name"], [0, 0, 0, 0])
                if is_kept(e, keep, a.keep_ptx):
                    st[0] += 1
                    st[2] += e["pay_size"]
                else:
                    st[1] += 1
                    st[3] += e["pay_size"]
                    blank.append((e["pay_off"], e["pay_size"], e))

    def order(n):
        digits = "".join(ch for ch in n.split("_")[-1] if ch.isdigit())
        return (n.split("_")[0], int(digits or 0), n)

    total_blank = sum(n for _o, n, _e in blank)
    print("input: %s (%d bytes)" % (a.input, len(d)))
    for sec, conts in parsed:
        print("section %-16s file off 0x%x size %d: %d containers, %d entries"
              % (sec["name"], sec["off"], sec["size"], len(conts),
                 sum(len(c["entries"]) for c in conts)))
    print("fatbin wrappers (.nvFatBinSegment) pointing at a parsed container: %d"
          " (unresolved: %d)" % (wok, wunk))
    print("%-14s %7s %7s %14s %14s" % ("entry", "kept", "blanked", "bytes kept", "bytes blanked"))
    for name in sorted(stats, key=order):
        k, b, bk, bb = stats[name]
        print("%-14s %7d %7d %14d %14d" % (name, k, b, bk, bb))
    print("payload bytes blanked: %d (%.1f MiB of a %.1f MiB file)"
          % (total_blank, total_blank / 2**20, len(d) / 2**20))
    for n, c in unknown_kinds.items():
        print("WARNING: %d entries of unknown kind (%s) left intact" % (c, n), file=sys.stderr)
    if not any(st[0] for n, st in stats.items() if n.startswith("sm_")):
        print("WARNING: no cubin kept at all for --keep %s" % " ".join(a.keep), file=sys.stderr)
    if a.dry_run:
        return 0

    outdir = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(prefix=".fatbin_keep.", dir=outdir)
    os.close(fd)
    try:
        shutil.copyfile(a.input, tmp)
        shutil.copymode(a.input, tmp)
        chunk = bytes(1 << 20)
        expect = []             # (offset, bytes) for stubbed payloads
        with open(tmp, "r+b") as f:
            for off, n, e in blank:
                data, kind = blank_bytes(e, a.zero)
                how[kind] += 1
                f.seek(off)
                if data is not None:
                    assert len(data) == n
                    f.write(data)
                    expect.append((off, data))
                    continue
                while n:
                    w = min(n, len(chunk))
                    f.write(chunk[:w])
                    n -= w
        # re-verify: same size, same bytes outside blanked payloads, same
        # fatbin structure, blanked payloads hold exactly what we meant
        with open(tmp, "rb") as f:
            o = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if len(o) != len(d):
                raise Refuse("output size changed")
            ranges = [(off, n) for off, n, _e in blank]
            if not same_outside(d, o, ranges):
                raise Refuse("output differs from input outside the blanked payloads")
            p2, _w = scan(o)
            sig = lambda p: [[(e["off"], e["name"], e["pay_size"]) for c in cs
                              for e in c["entries"]] for _s, cs in p]
            if sig(p2) != sig(parsed):
                raise Refuse("output fatbin structure differs from input")
            stubbed = dict(expect)
            for off, n in ranges:
                want = stubbed.get(off)
                if (o[off:off + n] != want) if want is not None else any(o[off:off + n]):
                    raise Refuse("blanked payload at 0x%x not as written" % off)
            o.close()
        os.replace(tmp, a.output)
    except BaseException as ex:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(ex, Refuse):
            print("fatbin_keep: REFUSING: %s" % ex, file=sys.stderr)
            return 2
        raise
    print("blanked entries: %d as zstd stub frames, %d zero-filled"
          % (how["stub"], how["zero"]))
    print("wrote %s (%d bytes, layout unchanged)" % (a.output, len(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
