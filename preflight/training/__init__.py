"""The job's training step, for the model and pipeline checks alike: the model built (``build``), one step
(``step``), and the step timed in windows, alone or interleaved (``timed``)."""
