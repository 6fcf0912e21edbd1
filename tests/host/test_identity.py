"""Who the job runs as (``host.identity``): run_as, then Slurm's variables, then the gate's own."""

from __future__ import annotations

import os
import pwd

import pytest

from preflight.errors import UsageError
from preflight.host import identity

NOBODY = pwd.getpwnam("nobody")


def test_run_as_names_or_numbers_take_the_users_entry_and_its_groups():
    named = identity.job("nobody", environ={"SLURM_JOB_UID": "0"})
    assert (named.uid, named.gid, named.name, named.source) == (NOBODY.pw_uid, NOBODY.pw_gid, "nobody",
                                                                  "defaults.run_as")
    assert named.groups == tuple(os.getgrouplist("nobody", NOBODY.pw_gid))
    assert identity.job(str(NOBODY.pw_uid), environ={}) == named  # the uid finds the same entry
    assert identity.job(f"nobody:{os.getgid()}", environ={}).gid == os.getgid()


def test_a_uid_the_node_does_not_know_takes_gid_0_as_docker_user_does():
    found = identity.job("54321", environ={})
    assert (found.uid, found.gid, found.groups, found.name) == (54321, 0, (0,), "54321")
    assert identity.job("54321:777", environ={}).groups == (777,)


def test_slurms_job_uid_and_gid_name_the_job_where_run_as_does_not():
    found = identity.job("", environ={"SLURM_JOB_UID": str(NOBODY.pw_uid), "SLURM_JOB_GID": "4242"})
    assert (found.uid, found.gid, found.source) == (NOBODY.pw_uid, 4242, "SLURM_JOB_UID")
    assert identity.job(None, environ={}) == identity.own()


@pytest.mark.parametrize("run_as, said", [
    ("no-such-user", "defaults.run_as: no user 'no-such-user' on this node"),
    ("nobody:no-such-group", "defaults.run_as: no group 'no-such-group' on this node"),
])
def test_a_name_the_node_does_not_know_is_a_usage_error_naming_it(run_as, said):
    with pytest.raises(UsageError) as raised:
        identity.job(run_as, environ={})
    assert str(raised.value).startswith(said)


@pytest.mark.skipif(os.geteuid() != 0, reason="a gate that is root takes the job's identity")
def test_root_takes_the_jobs_identity_and_its_worker_drops_groups_gid_and_uid():
    job = identity.job("nobody", environ={})
    assert job.taken and not job.is_own
    assert job.popen() == {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid, "extra_groups": list(job.groups)}
    assert identity.not_the_jobs_view(job) == ("", "")
    assert identity.own().popen() == {}
    note, fix = identity.not_the_jobs_view(identity.own())
    assert note == "measured as root: not the job's view" and "set defaults.run_as to the job's user" in fix


def test_a_gate_that_is_not_root_says_whose_view_it_measured(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getegid", lambda: 1000)
    job = identity.Identity(2000, 2000, (2000,), "trainer", "defaults.run_as")
    assert not job.taken
    note, fix = identity.not_the_jobs_view(job)
    assert note.startswith("measured as uid 1000") and note.endswith(
        "not as the job's uid 2000 (trainer), gid 2000 (defaults.run_as)")
    assert fix == "run the gate as root, so that it can take the job's identity"
