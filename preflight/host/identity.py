"""Who the job runs as: its uid, gid and groups, and how the gate's worker takes that identity.

A Slurm prolog, a CI job or an init container often runs the gate as root while the training job runs as its
user: root reads files of any mode, ignores RLIMIT_NPROC and RLIMIT_MEMLOCK, and passes nodes where the job
dies. So the checks whose answer depends on who reads run in a worker started as the job: ``run_as`` in
``defaults`` (``UID[:GID]``, names or numbers), else slurmd's ``SLURM_JOB_UID``/``SLURM_JOB_GID``, else the
gate's own. The worker drops supplementary groups, gid and uid, in that order (``subprocess.Popen``'s ``user``,
``group``, ``extra_groups``), and keeps no capability: setuid(2) from root to another uid clears them all. Its
HOME, USER and LOGNAME are the job's (``Identity.environ``), not root's.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from typing import Any, Mapping, NamedTuple

from preflight.errors import UsageError

OWN = "the gate's own"  # ``Identity.source`` where nothing names the job's user


class Identity(NamedTuple):
    """A user the checks run as: uid, primary gid, supplementary groups, and what named it."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str  # the user's name, or the uid where the node has no entry for it
    source: str  # "defaults.run_as", "SLURM_JOB_UID", or ``OWN``
    home: str = "/"  # its passwd entry's home; "/" where it has none, as docker and the kubelet set HOME then
    known: bool = True  # the node's passwd names it (getpass.getuser() then works without USER)

    def describe(self) -> str:
        """``uid 65534 (nobody), gid 65534``: for notes and errors."""
        named = f" ({self.name})" if self.name != str(self.uid) else ""
        return f"uid {self.uid}{named}, gid {self.gid}"

    @property
    def is_own(self) -> bool:
        """Whether this is the gate's own user and group: its worker needs no switch."""
        return (self.uid, self.gid) == (os.geteuid(), os.getegid())

    @property
    def taken(self) -> bool:
        """Whether the gate can run a worker as this identity: it is the gate's own, or the gate is root."""
        return self.is_own or os.geteuid() == 0

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` as the job's process would have it: HOME, USER and LOGNAME its own, not the gate's (torch's
        caches live under HOME; ``getpass.getuser()`` reads USER first and fails for an unknown uid without it);
        ``base`` unchanged for the gate's own user."""
        env = dict(base)
        if self.is_own:
            return env
        env["HOME"] = self.home
        for key in ("USER", "LOGNAME"):
            if self.known:
                env[key] = self.name
            else:
                env.pop(key, None)
        return env

    def popen(self) -> dict[str, Any]:
        """``subprocess.Popen`` keywords that start a process as this identity ({} for the gate's own)."""
        if self.is_own:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


def own() -> Identity:
    """The gate's effective user, group and groups."""
    uid, gid = os.geteuid(), os.getegid()
    return Identity(uid, gid, tuple(os.getgroups()), _name(uid), OWN, os.environ.get("HOME", "/"))


def job(run_as: str | None, environ: Mapping[str, str] = os.environ) -> Identity:
    """The job's identity: ``run_as`` (``UID[:GID]``, names or numbers), else ``SLURM_JOB_UID`` and
    ``SLURM_JOB_GID`` (slurmd hands them to the prolog and health check), else the gate's own.

    A user without a gid given takes its passwd entry's group, or gid 0 where it has no entry (as ``docker run
    --user UID`` does); supplementary groups come from the user's entry (``getgrouplist``).

    Raises:
        UsageError: ``run_as`` or ``SLURM_JOB_UID`` names a user or group this node does not know.
    """
    if run_as:
        user, _, group = str(run_as).partition(":")
        return _resolve(user, group, "defaults.run_as")
    if environ.get("SLURM_JOB_UID"):
        return _resolve(environ["SLURM_JOB_UID"], environ.get("SLURM_JOB_GID", ""), "SLURM_JOB_UID")
    return own()


def not_the_jobs_view(job: Identity) -> tuple[str, str]:
    """(what a row measured as someone other than the job says, the fix); ("", "") where the job's view was taken.

    The gate measures as root where nothing names the job's user (neither ``run_as`` nor Slurm), and as its own
    user where it is not root and ``run_as`` names another (a process cannot take another user's identity).
    """
    if not job.taken:
        return (f"measured as {own().describe()}, not as the job's {job.describe()} ({job.source})",
                "run the gate as root, so that it can take the job's identity")
    if job.source == OWN and job.uid == 0:
        return ("measured as root: not the job's view",
                "root reads any file and ignores per-user limits: set defaults.run_as to the job's user (UID[:GID]), "
                "or run in a Slurm prolog or health check, where SLURM_JOB_UID names it")
    return "", ""


def workspace(user: Identity, temp_dir: str) -> str:
    """Where a worker running as ``user`` keeps its files: ``temp_dir`` for the gate's own user, else a folder in it
    that ``user`` owns (``temp_dir`` may be the gate's alone). The caller removes it."""
    if user.is_own:
        return temp_dir
    place = tempfile.mkdtemp(prefix="preflight-job-", dir=temp_dir)
    os.chown(place, user.uid, user.gid)
    return place


def _resolve(user: str, group: str, source: str) -> Identity:
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        if not user.isdigit():
            raise UsageError(f"{source}: no user {user!r} on this node: name the job's user by a name this node "
                             f"knows (getent passwd) or by its uid") from None
        entry = None
    uid = int(user) if entry is None else entry.pw_uid
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise UsageError(f"{source}: no group {group!r} on this node: name the job's group by a name this node "
                             f"knows (getent group) or by its gid") from None
    else:
        gid = entry.pw_gid if entry is not None else 0
    groups = tuple(os.getgrouplist(entry.pw_name, gid)) if entry is not None else (gid,)
    if entry is None:
        return Identity(uid, gid, groups, str(uid), source, "/", known=False)
    return Identity(uid, gid, groups, entry.pw_name, source, entry.pw_dir or "/")


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
