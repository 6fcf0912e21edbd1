"""The registry of checks: one explicit dict of modules; nothing keeps a second list."""

from __future__ import annotations

from preflight.checks import collective, cuda, dataloader, model, p2p, pipeline, shm, storage, transfer, xid
from preflight.checks.base import Check, Metric

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


def metric_of(check: str, name: str) -> Metric | None:
    """``check``'s metric ``name``, from its table; None for a check or metric this version does not know."""
    return next((m for m in getattr(CHECKS.get(check), "METRICS", ()) if m.name == name), None)
