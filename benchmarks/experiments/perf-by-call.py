#!/usr/bin/env python3
"""The samples of a `perf record -g` profile by thread and by the first of
a few system calls (or a page fault) on their stack; samples under none
of them are "code" (BENCHMARKS.md, "Where a turn of 1000 × 1 × 5 goes").

    perf script -i PERF_DATA -F comm,ip,sym > samples.txt
    benchmarks/experiments/perf-by-call.py samples.txt
"""
import collections
import sys

# (name, a kernel function on the stack of every sample in it), first match wins.
CALLS = [
    ("sendmsg", "__sys_sendmsg"),
    ("recvfrom", "__sys_recvfrom"),
    ("pwrite64", "__x64_sys_pwrite64"),
    ("fdatasync", "__x64_sys_fdatasync"),
    ("pread64", "__x64_sys_pread64"),
    ("page fault", "asm_exc_page_fault"),
    ("epoll_wait", "do_epoll_wait"),
    ("mprotect", "__x64_sys_mprotect"),
    ("futex", "__x64_sys_futex"),
    ("write", "__x64_sys_write"),
    ("madvise", "__x64_sys_madvise"),
    ("interrupt", "asm_sysvec"),
    ("interrupt", "asm_common_interrupt"),
    ("scheduler", "schedule"),
]

counts = collections.Counter()
total = 0
with open(sys.argv[1]) as f:
    for sample in f.read().split("\n\n"):
        lines = [l.strip() for l in sample.split("\n") if l.strip()]
        if not lines:
            continue
        thread = lines[0]
        frames = [l.split(None, 1)[1] if " " in l else "" for l in lines[1:]]
        what = next(
            (name for name, fn in CALLS if any(fn in frame for frame in frames)), "code"
        )
        counts[(thread, what)] += 1
        total += 1
for (thread, what), n in counts.most_common():
    if n * 1000 >= total:
        print(f"{thread:20} {what:12} {100 * n / total:5.1f} %")
