"""Join the launcher and a one-directory build into one executable.

    python packaging/onefile.py LAUNCHER DIR VERSION OUTPUT

The output is LAUNCHER's bytes, then the payload (every entry of DIR, files
zlib-compressed), then a 64-byte trailer that packaging/launcher.c reads:
magic "CRDLNCH1", payload offset and length (little-endian u64) and the
cache directory name VERSION-HASH (NUL-padded to 40 bytes).

Payload entries, in an order that creates parents first:
  u8 type ('d' directory, 'f' file, 'l' symlink), u32 mode, u16 len + path,
  then for 'f': u64 size, u64 compressed size, zlib data;
           'l': u16 len + link target.
A zero type byte ends the payload. The output is reproducible: the same
inputs give the same bytes (sorted entries, no timestamps).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import sys
import zlib

MAGIC = b"CRDLNCH1"
NAME_SIZE = 40


def entries(root: str):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            yield rel, full, os.lstat(full)


def payload(root: str) -> bytes:
    out = bytearray()

    def path(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<H", len(b)) + b

    for rel, full, st in entries(root):
        mode = stat.S_IMODE(st.st_mode) & 0o755
        if stat.S_ISLNK(st.st_mode):
            out += b"l" + struct.pack("<I", 0o777) + path(rel) + path(os.readlink(full))
        elif stat.S_ISDIR(st.st_mode):
            out += b"d" + struct.pack("<I", mode | 0o700) + path(rel)
        elif stat.S_ISREG(st.st_mode):
            with open(full, "rb") as f:
                data = f.read()
            packed = zlib.compress(data, 9)
            out += (b"f" + struct.pack("<I", mode | 0o400) + path(rel)
                    + struct.pack("<QQ", len(data), len(packed)) + packed)
        else:
            raise SystemExit(f"{full}: not a file, directory or symlink")
    out += b"\0"
    return bytes(out)


def main() -> None:
    launcher, root, version, output = sys.argv[1:5]
    if not os.path.isfile(os.path.join(root, "cronrd")):
        raise SystemExit(f"{root}/cronrd is missing: not a one-directory build")
    with open(launcher, "rb") as f:
        head = f.read()
    body = payload(root)
    name = f"{version}-{hashlib.sha256(body).hexdigest()[:16]}".encode()
    if len(name) >= NAME_SIZE or b"/" in name:
        raise SystemExit(f"bad version {version!r}")
    trailer = MAGIC + struct.pack("<QQ", len(head), len(body)) + name.ljust(NAME_SIZE, b"\0")
    assert len(trailer) == 64
    tmp = output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + body + trailer)
    os.chmod(tmp, 0o755)
    os.replace(tmp, output)
    print(f"{output}: {len(head) + len(body) + 64} bytes, cache name {name.decode()}")


if __name__ == "__main__":
    main()
