"""One torchrun worker of tests/fleet/test_distributed.py: what a process group of the fleet is created under.

Run as ``torchrun --nproc-per-node 2 tests/fleet/nccl_probe.py TIMEOUT_S``. Every rank prints the
TORCH_NCCL_ASYNC_ERROR_HANDLING its launcher set and the value the C library's getenv returns at the
moment ``init_process_group`` is called: what ProcessGroupNCCL's constructor reads (c10d getCvarInt,
through std::getenv), whatever backend the group has. Then rank 1 hangs (alive, silent) while rank 0
waits at a barrier and prints the FleetError that names it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import torch.distributed as dist

from preflight.fleet import distributed

NAME = b"TORCH_NCCL_ASYNC_ERROR_HANDLING"


def main() -> int:
    timeout_s = float(sys.argv[1])
    launcher = os.environ.get(NAME.decode())
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    seen: list[bytes | None] = []
    create = dist.init_process_group

    def init_process_group(*args: object, **kwargs: object) -> None:
        seen.append(libc.getenv(NAME))
        create(*args, **kwargs)

    dist.init_process_group = init_process_group
    launch = distributed.launch_from(os.environ)
    fleet = distributed.Fleet(launch, timeout_s, backend="gloo")
    fleet.join()
    print(f"rank {launch.rank}: launcher set {launcher!r}, the process group was created under {seen[0]!r}",
          flush=True)
    if launch.rank == 1:
        time.sleep(timeout_s * 1.5)  # hung: its process lives, its peers hear nothing
        return 0
    try:
        fleet.barrier("the probe's barrier")
    except distributed.FleetError as error:
        print(f"rank 0 named: {error}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
