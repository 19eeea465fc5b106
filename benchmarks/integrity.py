"""What the integrity checks cost: checking every row of a data file before anything loads.

    python -m benchmarks.integrity                       # a 100k-row JSONL
    python -m benchmarks.integrity --rows 1000000 --dir /scratch/me --json integrity.json

Data (validation.py): a JSONL file of --rows rows in the ultrafeedback schema (the DPO recipes' own), checked
row by row as a run checks it before anything loads. (Checkpoints carry no checksums any more: a checkpoint is
complete when transformers wrote it whole and its weights open, checkpoints.py, which costs no hashing.)
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the data file to check (default 100000)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the best is reported (default 3)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.rows < 1 or args.repeats < 1:
        print("error: --rows and --repeats must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        rows = bench_rows(folder, args.rows, args.repeats)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the "
               f"end, Python {platform.python_version()}")
    print(f"machine: {machine}")
    print(f"data rows: {rows['rows']} rows ({rows['bytes'] / 1e6:.1f} MB) checked in {rows['seconds']:.2f} s "
          f"(CPU {rows['cpu_seconds']:.2f} s; {rows['rows_per_s']:,.0f} rows/s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
