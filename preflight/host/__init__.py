"""What the node is: CPUs and cgroup limits, host memory, filesystems, GPUs through torch and NVML,
and the lock that lets one preflight run at a time measure it (``node_lock``).

Modules here read facts of the machine and its container; they never judge them and import
nothing above ``measurement`` and ``units``.
"""
