from __future__ import annotations

import pytest

from preflight.checks import CHECKS
from preflight.commands import explain
from preflight.errors import UsageError


@pytest.mark.parametrize("name", list(CHECKS))
def test_explains_every_check_from_its_tables(name):
    text = explain.render(name)
    check = CHECKS[name]
    assert text.startswith(f"{name}: {check.HELP}\n")
    for item in (*check.OPTIONS, *check.METRICS):
        assert f"  {item.name} " in text
    assert check.__doc__.strip().splitlines()[0] in text


def test_unknown_check_suggests_the_closest():
    with pytest.raises(UsageError, match=r"unknown check `strage`: did you mean `storage`\?"):
        explain.render("strage")
