"""The registry of checks: one explicit dict of modules; nothing keeps a second list."""

from __future__ import annotations

from preflight.checks import collective, cuda, dataloader, model, p2p, pipeline, shm, storage, transfer, xid
from preflight.checks.base import Check

CHECKS: dict[str, Check] = {
    "cuda": cuda,
    "xid": xid,
    "shm": shm,
    "storage": storage,
    "dataloader": dataloader,
    "model": model,
    "pipeline": pipeline,
    "transfer": transfer,
    "p2p": p2p,
    "collective": collective,
}
