#!/usr/bin/env python3
"""What a group commit's sync costs when the WAL file grows, against when
it overwrites blocks already written (BENCHMARKS.md, "A WAL ready at
start"). No SQLite: COMMITS commits of FRAMES frames, each frame a 24-byte
write and a PAGE-byte write as SQLite's WAL takes them, then `fdatasync`;
first on a new file (appended), then on a file of zeros written and synced
beforehand (overwritten). Prints the process's CPU (user + system, from
getrusage) and the wall time per commit, three times each, and what was
counted as written per commit: the process's `write_bytes` (/proc/self/io)
and the sectors the disk under DIR wrote (its /sys/dev/block stat: the
whole machine's, so run it on a quiet one). On ext4 `write_bytes` counts
1-2 MB for each `fdatasync` of a file written over, whatever was
written, while the disk takes less than when it is appended to
(BENCHMARKS.md, "What `write_bytes` counts since the WAL is made ready at
start").

    python3 benchmarks/experiments/wal-growth.py [DIR] [COMMITS] [FRAMES] [PAGE]

DIR must be on the filesystem the database would use (default /tmp).
"""
import os
import resource
import sys
import time

directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
commits = int(sys.argv[2]) if len(sys.argv) > 2 else 200
frames = int(sys.argv[3]) if len(sys.argv) > 3 else 20
page = int(sys.argv[4]) if len(sys.argv) > 4 else 8192
disk = os.stat(directory).st_dev
disk_stat = f"/sys/dev/block/{os.major(disk)}:{os.minor(disk)}/stat"


def written():
    """(write_bytes of this process, bytes the disk under DIR has written)."""
    with open("/proc/self/io") as f:
        process = next(int(l.split()[1]) for l in f if l.startswith("write_bytes:"))
    try:
        with open(disk_stat) as f:
            device = int(f.read().split()[6]) * 512
    except OSError:
        device = 0
    return process, device


def run(ready):
    path = os.path.join(directory, "wal-growth.bin")
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if ready:
            zeros = b"\0" * (1 << 20)
            for _ in range(commits * frames * (page + 24) // len(zeros) + 1):
                os.write(fd, zeros)
            os.fsync(fd)
        header, body = b"h" * 24, os.urandom(page)
        w0 = written()
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        offset = 0
        for _ in range(commits):
            for _ in range(frames):
                os.pwrite(fd, header, offset)
                offset += 24
                os.pwrite(fd, body, offset)
                offset += page
            os.fdatasync(fd)
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        w1 = written()
    finally:
        os.close(fd)
        os.unlink(path)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"{'overwritten' if ready else 'appended':>11}: {cpu / commits * 1e6:5.0f} µs of CPU "
          f"and {(t1 - t0) / commits * 1e3:5.2f} ms per commit; "
          f"write_bytes {(w1[0] - w0[0]) / commits / 1024:6.0f} KB, "
          f"the disk {(w1[1] - w0[1]) / commits / 1024:4.0f} KB per commit")


for _ in range(3):
    run(False)
    run(True)
