"""How the job's samples reach a batch, for the dataloader and pipeline checks alike.

Sources (the files under a path, tar shards, the job's Dataset or DataLoader) and the job's settings
(``source``, ``settings``), cold reads (``cold``), the batch loop and its windows (``loop``), the worker
sweep (``sweep``), and the workers' footprint: memory, /dev/shm and tasks (``footprint``). Importing this
package imports no torch; its modules do.
"""
