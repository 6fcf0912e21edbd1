"""Pinned H2D/D2H: preflight's transfer check next to a plain torch copy loop, in one run, on each GPU.

Needs a CUDA (or ROCm) build of torch and a GPU; run by scripts/gpu-smoke.sh. The
reference is deliberately independent of preflight's code: one ``copy_`` per event pair on
the default stream, pinned host memory, 5 warm-up copies, median of ``--repeats`` (the loop
people write by hand, and nvbandwidth's measurement in its simplest form). Prints one
line per GPU and direction: preflight GB/s, reference GB/s and their ratio; the target is
a ratio within 0.90-1.10. Exit status 1 when a ratio is outside it or a GPU could not be
measured by either side (then its line says why, and the other GPUs are still compared).

    python3 bench/transfer_reference.py [--size-mib 256] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Callable, Sequence

from preflight.checks import transfer
from preflight.checks.base import Budget
from preflight.measurement import Measurement


def reference(index: int, direction: str, size: int, repeats: int) -> float:
    """Median GB/s (10^9 B/s) of single pinned copies timed with CUDA events on the default stream."""
    import torch

    host = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(0xA5)
    device = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", index)).fill_(0x5A)
    source, target = (host, device) if direction == "h2d" else (device, host)
    with torch.cuda.device(index):
        for _ in range(5):
            target.copy_(source, non_blocking=True)
        torch.cuda.synchronize()
        rates = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source, non_blocking=True)
            end.record()
            end.synchronize()
            rates.append(size / (start.elapsed_time(end) / 1e3) / 1e9)
    return statistics.median(rates)


def compare(measured: Sequence[Measurement], reference: Callable[[int, str], float]) -> tuple[list[str], bool]:
    """The table's lines for preflight's pinned copies next to ``reference(index, direction)``, and whether all agree.

    A GPU that one side could not measure gets a line with "-" and the reason, and counts as a
    disagreement; the others are still compared.
    """
    ours = {(m.device, m.metric): m for m in measured if m.metric in ("h2d_pinned", "d2h_pinned") and m.device}
    lines = [f"{'device':<8} {'copy':<11} {'preflight GB/s':>15} {'reference GB/s':>15} {'ratio':>7}"]
    all_ok = True
    for (device, metric), m in sorted(ours.items()):
        why = [] if isinstance(m.value, float) else [f"preflight could not measure: {m.reason}"]
        try:
            ref: float | None = reference(int(device.split(":")[1]), metric.split("_")[0])
        except RuntimeError as error:  # a CUDA error on this GPU: report it, go on with the next
            ref = None
            why.append(f"reference failed: {(str(error).strip().splitlines() or [type(error).__name__])[0]}")
        ratio = m.value / ref if isinstance(m.value, float) and ref else None
        ok = ratio is not None and 0.90 <= ratio <= 1.10
        all_ok &= ok
        flag = "" if ok else ("  OUTSIDE 10%" if ratio is not None else "  NOT MEASURED")
        lines.append(f"{device:<8} {metric:<11} {_figure(m.value, 2):>15} {_figure(ref, 2):>15} "
                     f"{_figure(ratio, 3):>7}{flag}")
        lines += [f"{'':<8} {reason}" for reason in why]
    for m in measured:
        if m.metric in ("link_rate", "h2d_link_efficiency", "numa_node", "numa_local", "pinned_speedup", "pinned_alloc"):
            lines.append(f"{m.device or '':<8} {m.metric:<20} {m.value if m.value is not None else m.reason} "
                         f"{m.unit} {m.method}")
    return lines, all_ok


def _figure(value: object, decimals: int) -> str:
    return f"{value:.{decimals}f}" if isinstance(value, float) else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    size = args.size_mib << 20
    measured = transfer.measure({"size": size, "pinned_size": size}, Budget(duration_s=8.0, timeout_s=120.0))
    if not any(m.device for m in measured):
        print(f"no GPU measurement: {next(iter(measured)).reason}")
        return 1
    lines, all_ok = compare(measured, lambda index, direction: reference(index, direction, size, args.repeats))
    print("\n".join(lines))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
