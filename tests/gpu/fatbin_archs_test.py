"""Every CUDA source of the CUDA backend is compiled for every GPU architecture the build lists: each object of the
backend's archive that has device code carries machine code (SASS, an ELF entry of its fat binary) for each of
DTRAIN_CUDA_ARCHITECTURES, so no listed GPU falls back to JIT-compiling PTX, or finds no code at all. No GPU needed:
the fat binary (.nv_fatbin) is read as nvcc writes it -- a header (magic 0xBA55ED50, version, header size, payload
size), then entries (kind: 1 PTX, 2 ELF; the architecture at byte 28 of each entry's header).

Usage: fatbin_archs_test.py ARCHIVE "80;90"
"""

import os
import re
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "SASS"}


def entries(fatbin):
    """(kind name, sm) of every entry of every fat binary in the section's bytes."""
    found, off = [], 0
    while off + 16 <= len(fatbin):
        magic, _version, header_size, payload_size = struct.unpack_from("<IHHQ", fatbin, off)
        if magic != FATBIN_MAGIC:
            raise ValueError(f"no fat binary header at byte {off} (magic {magic:#x})")
        p, end = off + header_size, off + header_size + payload_size
        while p < end:
            kind, _unknown, entry_header, size = struct.unpack_from("<HHIQ", fatbin, p)
            found.append((KINDS.get(kind, f"kind {kind}"), struct.unpack_from("<I", fatbin, p + 28)[0]))
            p += entry_header + size
        off = end
    return found


def main():
    # "90", "90a", "90-real": the number is the architecture.
    archive, wanted = sys.argv[1], sorted(int(re.match(r"\d+", a).group()) for a in sys.argv[2].split(";") if a)
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["ar", "x", os.path.abspath(archive)], cwd=work, check=True)
        for name in sorted(os.listdir(work)):
            section = os.path.join(work, name + ".fatbin")
            proc = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", name, section], cwd=work,
                                  capture_output=True, text=True)
            if proc.returncode != 0 or not os.path.exists(section) or os.path.getsize(section) == 0:
                continue  # host code only
            found = entries(open(section, "rb").read())
            sass = sorted({sm for kind, sm in found if kind == "SASS"})
            missing = [sm for sm in wanted if sm not in sass]
            checked += 1
            print(("ok   " if not missing else "FAIL ") + f"{name}: SASS for sm {sass}, PTX for sm "
                  f"{sorted({sm for kind, sm in found if kind == 'PTX'})}; the build lists {wanted}")
            if missing:
                failures.append(f"{name} lacks machine code for sm {missing}")
    if checked == 0:
        failures.append(f"no object of {archive} has device code (.nv_fatbin)")
    for failure in failures:
        print("FAIL " + failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
