"""The rate a node must deliver, in the user's terms: per-GPU rate x GPUs x headroom."""

from __future__ import annotations

from typing import NamedTuple

from preflight.units import format_value


class Required(NamedTuple):
    per_gpu: float  # samples/s one GPU consumes
    gpus: int
    headroom_pct: float  # extra margin, 20 for 20 %

    @property
    def rate(self) -> float:
        """samples/s the loader must deliver."""
        return self.per_gpu * self.gpus * (1 + self.headroom_pct / 100)

    def arithmetic(self) -> str:
        """``300 samples/s/GPU x 8 GPUs x 1.2 headroom = 2880 samples/s``."""
        margin = f" x {1 + self.headroom_pct / 100:g} headroom" if self.headroom_pct else ""
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        return (f"{format_value(self.per_gpu, 'samples/s')}/GPU x {gpus}{margin} = "
                f"{format_value(self.rate, 'samples/s')}")


def visible_gpus() -> int:
    """GPUs this process may use (torch.cuda.device_count honours CUDA_VISIBLE_DEVICES)."""
    import torch

    return torch.cuda.device_count()
