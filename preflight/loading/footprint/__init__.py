"""What the job's DataLoader workers hold: memory (``memory``, ``cow``), /dev/shm (``shared_memory``) and tasks
(``tasks``), measured and projected to an epoch."""
