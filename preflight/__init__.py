"""preflight: can this node feed and run my training job? Measure, judge, and gate."""

__version__ = "0.1.0"
