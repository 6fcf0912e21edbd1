"""The DataLoader sampler that continues the run's one pass over the dataset across worker pools."""

from __future__ import annotations

import random
from typing import Iterator, Sequence

from preflight.io.dataset import WARM, Dataset, warm_note


class PassSampler:
    """A DataLoader sampler that continues one pass over ``names`` across every DataLoader given it.

    Fresh worker pools are fresh DataLoaders; with ``shuffle=True`` each would draw a new permutation and
    read again what the last one read. This one holds one permutation (``seed``) of the files not yet read
    in this run, fixed when its first DataLoader starts (after the checks and phases before it), and a cursor
    that every iterator advances: indices a pool took into its prefetch were read by its workers, so they
    are not handed out again. When the cursor reaches the end the pass is spent (``spent``) and the iterator
    stops, as the job's epoch ends. Where every file was already read in this run, the pass is over all of
    them again and ``warm`` says so. ``shuffle=False`` keeps the walk's order, as the job's would.
    """

    def __init__(self, data: Dataset, size: int, names: Sequence[str] | None = None, shuffle: bool = True,
                 seed: int = 0) -> None:
        # names: the files, one per index; None for a job's Dataset of ``size`` samples, whose files are not known
        self.data, self.size = data, size
        self.names = list(names) if names is not None else None
        self.shuffle, self.seed = shuffle, seed
        self.before = data.touched_count(self.names or ())  # how many of the files checks before this one read
        self.order: list[int] | None = None
        self.cursor = 0
        self.warm = False  # every sample of the current pass was read before in this run
        self.passes = 1  # passes begun: more than one where a loader was iterated past the pass's end

    def _start(self) -> list[int]:
        if self.order is None:
            if self.names is None:
                order = list(range(self.size))
            else:
                unread = set(self.data.fresh(self.names))
                order = [i for i, name in enumerate(self.names) if name in unread]
                self.warm = not order
                order = order or list(range(self.size))
            self.order = self._permuted(order, self.seed)
        return self.order

    def __iter__(self) -> Iterator[int]:
        order = self._start()
        if self.cursor >= len(order):  # a loader iterated again after the pass ended: the next epoch, a reread
            order = self._again()
        while self.cursor < len(order):
            self.cursor += 1
            yield order[self.cursor - 1]

    def _again(self) -> list[int]:
        """Start another pass over every sample (a training loop's next epoch): ``warm`` from now on."""
        self.passes += 1
        self.warm, self.cursor = True, 0
        self.order = self._permuted(list(range(self.size)), self.seed + self.passes)
        return self.order

    def _permuted(self, order: list[int], seed: int) -> list[int]:
        """``order`` shuffled with ``seed`` where the job shuffles, else as it is."""
        if self.shuffle:
            random.Random(seed).shuffle(order)
        return order

    def __len__(self) -> int:
        return len(self._start()) - self.cursor

    @property
    def spent(self) -> bool:
        """Whether every index of the pass was handed out."""
        return self.order is not None and self.cursor >= len(self.order)

    @property
    def read_before(self) -> int:
        """How many of its files checks before this one read (0 before its first DataLoader starts)."""
        return 0 if self.order is None or self.warm else self.before

    def describe(self) -> str:
        """How the pass went, for a row's note: how many files it read of how many, whether warm, and what read
        the rest: the files of the pass and those checks before this one read add up to ``size``."""
        order = self._start()
        if self.passes > 1:
            return (f"{self.passes} passes over the {self.size} samples: the first is the job's first epoch, the "
                    f"others re-read it ({WARM.strip()} a cache can serve them)")
        said = f"one pass: {self.cursor} of {len(order)} files read once"
        if self.read_before:
            said += (f" ({self.read_before} {'other was' if self.read_before == 1 else 'others were'} read by checks "
                     f"before this one)")
        return warm_note(self.cursor, self.size) if self.warm else said
