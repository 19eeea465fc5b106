"""What the integrity checks cost: checkpoint checksums per GB, and checking every row of a data file.

    python -m benchmarks.integrity                       # 1 GiB checkpoint file, 100k-row JSONL
    python -m benchmarks.integrity --gib 4 --rows 1000000 --dir /scratch/me --json integrity.json

Checksums (checkpoints.py): a file of --gib GiB is written to --dir (put it on the file system your runs write
to), then its xxh3-64 checksum is taken as a save takes it (right after the write: the bytes are still in the page
cache) and, for comparison, sha256 over the same bytes. `in memory` hashes a buffer already in RAM: the hash's own
speed, with no file reading at all. A resume reads every file once more to verify it; on a cold cache that
costs what reading the checkpoint from disk costs, which loading it costs again.

Data (validation.py): a JSONL file of --rows rows in the ultrafeedback schema (the DPO recipes' own), checked
row by row as a run checks it before anything loads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def _best(seconds: list[float]) -> float:
    return min(seconds)


def _timed(function) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a machine shared with other work the CPU time is the
    better measure of what the check itself costs."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_checksums(folder: Path, gib: float, repeats: int) -> dict:
    import xxhash

    from rlhf_recipes.checkpoints import file_checksum

    size = int(gib * 2**30)
    block = os.urandom(2**20) * 16  # 16 MiB of random bytes (the hash does not care that they repeat)
    path = folder / "bench-checkpoint.bin"
    start = time.perf_counter()
    with path.open("wb") as f:
        written = 0
        while written < size:
            n = min(len(block), size - written)
            f.write(block[:n])
            written += n
        f.flush()
        os.fsync(f.fileno())
    write_s = time.perf_counter() - start
    try:
        xxh = [_timed(lambda: file_checksum(path)) for _ in range(repeats)]

        def sha256() -> None:
            h = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(16 * 2**20):
                    h.update(chunk)

        sha = _timed(sha256)[0]
    finally:
        path.unlink()
    t = time.perf_counter()
    for _ in range(max(1, int(gib * 64))):  # as many bytes as the file, from one 16 MiB buffer in RAM
        xxhash.xxh3_64(block).digest()
    memory = time.perf_counter() - t
    gb = size / 1e9
    wall = _best([w for w, _ in xxh])
    return {"bytes": size, "write_s_per_gb": write_s / gb, "xxh3_64_s_per_gb": wall / gb,
            "xxh3_64_cpu_s_per_gb": _best([c for _, c in xxh]) / gb, "xxh3_64_gb_per_s": gb / wall,
            "sha256_s_per_gb": sha / gb,
            "xxh3_64_in_memory_gb_per_s": max(1, int(gib * 64)) * len(block) / 1e9 / memory}


def bench_rows(folder: Path, rows: int, repeats: int) -> dict:
    from rlhf_recipes.data.sources import SOURCES
    from benchmarks.bad_inputs import GOOD_ROW
    from rlhf_recipes.validation import check_local_data

    path = folder / "bench-rows.jsonl"
    line = json.dumps(GOOD_ROW) + "\n"
    path.write_text(line * rows)
    try:
        times = [_timed(lambda: check_local_data(str(path), SOURCES["ultrafeedback"], "bench")) for _ in range(repeats)]
        size = path.stat().st_size
    finally:
        path.unlink()
    wall = _best([w for w, _ in times])
    return {"rows": rows, "bytes": size, "seconds": wall, "cpu_seconds": _best([c for _, c in times]),
            "rows_per_s": rows / wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.integrity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="size of the checkpoint file to hash (default 1)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the data file to check (default 100000)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the best is reported (default 3)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.gib <= 0 or args.rows < 1 or args.repeats < 1:
        print("error: --gib must be > 0, --rows and --repeats at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        checksums = bench_checksums(folder, args.gib, args.repeats)
        rows = bench_rows(folder, args.rows, args.repeats)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the "
               f"end, Python {platform.python_version()}")
    print(f"machine: {machine}")
    print(f"checksums, a {checksums['bytes'] / 2**30:g} GiB file just written (page cache):")
    print(f"  xxh3-64   {checksums['xxh3_64_s_per_gb']:.3f} s/GB  ({checksums['xxh3_64_gb_per_s']:.2f} GB/s; CPU "
          f"{checksums['xxh3_64_cpu_s_per_gb']:.3f} s/GB)   <- at every save, and again at resume")
    print(f"  sha256    {checksums['sha256_s_per_gb']:.3f} s/GB  (for comparison)")
    print(f"  xxh3-64 in memory {checksums['xxh3_64_in_memory_gb_per_s']:.1f} GB/s;  writing the file took "
          f"{checksums['write_s_per_gb']:.3f} s/GB")
    print(f"data rows: {rows['rows']} rows ({rows['bytes'] / 1e6:.1f} MB) checked in {rows['seconds']:.2f} s "
          f"(CPU {rows['cpu_seconds']:.2f} s; {rows['rows_per_s']:,.0f} rows/s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "checksums": checksums, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
