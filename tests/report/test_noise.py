"""The duration ``preflight diff`` names as the one that would tell (issue 44): the samples it asks for are counted
from the samples the run took, so the run it names buys them."""

from __future__ import annotations

import math

from preflight.report import noise


def test_a_floor_bound_figure_of_two_samples_needs_the_samples_that_hold_the_floor_to_the_band():
    within = 0.20
    needed = within / noise.SIGMAS / math.sqrt(2)  # each run's share of the band
    wanted = noise.FLOOR_SAMPLES * (noise.floor("storage.seq_read").cv / needed) ** 2  # about 11.7 samples
    assert 11 < wanted < 12
    steady = [30.2, 30.3]
    assert noise.samples_to_tell("storage.seq_read", steady, within) == wanted / 2  # 2 taken: 5.8x, not 3.9x
    assert noise.samples_to_tell("storage.seq_read", steady * 2, within) == wanted / 4
    # a run that took those samples is held to the band it asked for
    taken = [30.2, 30.3] * math.ceil(wanted / 2)
    assert noise.band("storage.seq_read", taken, taken) <= within


def test_a_figure_whose_samples_spread_needs_their_error_to_fall_and_repeats_that_disagree_need_none():
    wide = [20.0, 40.0, 30.0, 25.0, 35.0]
    error = noise.standard_error(wide)
    needed = 0.20 / noise.SIGMAS / math.sqrt(2)
    assert error > needed and noise.samples_to_tell("storage.seq_read", wide, 0.20) == (error / needed) ** 2
    assert noise.samples_to_tell("storage.seq_read", wide, 0.20, runs=[20.0, 40.0]) is None
