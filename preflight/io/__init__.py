"""How preflight reads and writes files: the dataset walk, uncached reads, parallel I/O loops,
scratch data and a writable temporary place.

Modules here know nothing of checks or thresholds; the storage and DataLoader checks build on them.
"""
