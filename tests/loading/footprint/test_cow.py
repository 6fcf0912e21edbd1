"""The copy-on-write curve and its fit, on readings whose right answer is known."""

from __future__ import annotations

import pytest

from preflight.loading.footprint.cow import Saturation, fit
from preflight.loading.footprint.memory import Reading, Rollup

MiB = 2**20


def test_each_worker_copies_a_page_unless_it_missed_every_record_on_it():
    # 2 workers, 100 MiB each at saturation, 40 records a page: after half an epoch each worker read a quarter of
    # the records, and missed all 40 of a page with probability 0.75^40 (1e-5): 200 MiB, less a page's worth.
    curve = Saturation(100 * MiB, 40, 2, True, 400 * MiB)
    assert curve.copied(500_000, 1_000_000) == pytest.approx(2 * 100 * MiB * (1 - 0.75 ** 40))
    assert curve.copied(1_000, 1_000_000) == pytest.approx(2 * 100 * MiB * (1 - (1 - 0.0005) ** 40))
    assert curve.copied(2_000_000, 1_000_000) == 2 * 100 * MiB  # past the epoch: every page, no more
    assert Saturation(100 * MiB, 1, 2, True, 400 * MiB).copied(1_000, 1_000_000) == pytest.approx(100 * MiB * 0.001)


def test_two_readings_fit_every_curve_so_none_is_said_to_be_fitted():
    main = Rollup(500 * MiB, 300 * MiB, 400 * MiB, 0)
    pool = [Reading(1000, main, (Rollup(0, 0, 0, 40 * MiB),) * 2), Reading(11000, main, (Rollup(0, 0, 0, 90 * MiB),) * 2)]
    curve = fit([pool], 1_000_000, 2, 400 * MiB)
    assert not curve.fitted and curve.per_worker <= 400 * MiB
    assert fit([pool[:1]], 1_000_000, 2, 400 * MiB) is None  # one reading: no growth to fit
    assert fit([pool], 1_000_000, 0, 400 * MiB) is None  # no workers: nothing copied
