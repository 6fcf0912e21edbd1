"""Install preflight into the Python that has the job's torch, or beside it, and never touch that torch.

Layer: commands; standard library only (Python 3.9+): it runs before preflight is installed::

    PYTHONPATH=dist/train_preflight-0.1.0-py3-none-any.whl \\
        python3 -m preflight.commands.install [--python PY] [--venv DIR] dist/train_preflight-0.1.0-py3-none-any.whl

Finds the job's Python by name (``--python``, ``$PREFLIGHT_JOB_PYTHON``, ``python3``, ``python``; issue 35 case 1),
refuses one without torch, installs ``--no-deps`` under constraints pinning torch (into it, or a ``--venv`` that sees
its site folders) and verifies the same torch loads. stdout: the Python to run; exit 0, 2 refused (with the fix), 3
unverified. Steps and why: docs/install.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DISTRIBUTION = "train-preflight"
JOB_PYTHON_VARIABLE = "PREFLIGHT_JOB_PYTHON"
PTH_NAME = "_preflight_job_site.pth"
KINDS = {"venv": "a venv", "conda": "a conda prefix", "system": "a system Python"}

# Run by the job's Python (any version from 3.9): what it is, its torch, its site folders. Prints JSON.
_PROBE = r"""
import importlib.metadata, importlib.util, json, os, re, site, sys, sysconfig
def torch():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None:
        try:
            text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
            version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text).group(1)
        except (OSError, AttributeError):
            version = "unknown"
    return {"origin": spec.origin, "version": version}
def installed(names):
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found
paths = sysconfig.get_paths()
stdlib = {os.path.realpath(p) for p in (paths["stdlib"], paths["platstdlib"], os.path.dirname(os.__file__))}
sites = [p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) not in stdlib
         and os.path.basename(p) != "lib-dynload" and os.path.realpath(p) != os.path.realpath(os.getcwd())]
venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
preflight = importlib.util.find_spec("preflight")
print(json.dumps({
    "executable": sys.executable, "version": "%d.%d" % sys.version_info[:2], "prefix": sys.prefix,
    "kind": "venv" if venv else "conda" if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) else "system",
    "externally_managed": not venv and os.path.exists(os.path.join(paths["stdlib"], "EXTERNALLY-MANAGED")),
    "purelib": paths["purelib"], "writable": os.access(paths["purelib"], os.W_OK),
    "sites": sites, "torch": torch(), "pip": importlib.util.find_spec("pip") is not None,
    "preflight": preflight.origin if preflight else None, "installed": installed(json.loads(sys.argv[1])),
}))
"""


class Refused(Exception):
    """An install that would not measure the job's torch, or would change it: one line, exit 2."""


class Unverified(Exception):
    """The install ran but the torch preflight loads is not the job's, as it was: one line, exit 3."""


def _child_environ() -> dict[str, str]:
    """This environment without the PYTHONPATH entry that holds this module (the wheel or the checkout),
    so the job's Python is probed, and pip runs, as they are without us."""
    ours = os.path.realpath(Path(__file__).resolve().parents[2])  # x.whl, or the checkout
    environ = dict(os.environ)
    kept = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.realpath(p) != ours]
    if kept:
        environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        environ.pop("PYTHONPATH", None)
    return environ


def probe(python: str, names: tuple[str, ...] = ()) -> dict:
    """What the interpreter ``python`` is (see ``_PROBE``); Refused when it does not run."""
    try:
        done = subprocess.run([python, "-c", _PROBE, json.dumps(list(names))], capture_output=True, text=True,
                              env=_child_environ(), timeout=120, check=False)
    except OSError as error:
        raise Refused(f"cannot run the job's Python {python}: {error.strerror}: name the interpreter your "
                      f"training job runs with --python or {JOB_PYTHON_VARIABLE}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"the job's Python {python} did not run ({last}): name the interpreter your training job "
                      f"runs with --python or {JOB_PYTHON_VARIABLE}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def job_python(explicit: str | None) -> str:
    """The interpreter named, else ``$PREFLIGHT_JOB_PYTHON``, else ``python3`` then ``python`` on PATH, unresolved."""
    named = explicit or os.environ.get(JOB_PYTHON_VARIABLE)
    if named:
        found = shutil.which(named) if os.sep not in named else named
        if not found or not os.access(found, os.X_OK):
            raise Refused(f"no executable Python at {named}: name the interpreter your training job runs "
                          f"with --python or {JOB_PYTHON_VARIABLE}")
        return os.path.abspath(found) if os.sep in found else found
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found:
            return found
    raise Refused(f"no python3 or python on PATH: name the interpreter your training job runs with --python "
                  f"or {JOB_PYTHON_VARIABLE}")


def _pip(python: str, arguments: list[str], what: str) -> None:
    """``python -m pip install ARGUMENTS``, its output on our stderr; Refused with ``what`` when it fails."""
    sys.stderr.flush()
    done = subprocess.run([python, "-m", "pip", "install", *arguments], stdout=sys.stderr, stderr=sys.stderr,
                          env=_child_environ(), check=False)
    if done.returncode != 0:
        raise Refused(what)


def _make_beside(job: dict, venv: Path) -> str:
    """A venv at ``venv`` of the job's Python whose sys.path ends with the job's site folders; its python."""
    if venv.exists() and not (venv / "pyvenv.cfg").exists() and (not venv.is_dir() or any(venv.iterdir())):
        raise Refused(f"--venv {venv} holds other files and is not a venv: name a new or empty folder")
    if os.path.realpath(venv) == os.path.realpath(job["prefix"]):
        raise Refused(f"--venv {venv} is the job's own environment: leave --venv out to install into it")
    made = subprocess.run([job["executable"], "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                          text=True, env=_child_environ(), check=False)
    if made.returncode != 0:
        last = (made.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"{job['executable']} -m venv {venv} failed ({last}): install the venv module of that Python "
                      "(Debian: apt-get install python3-venv)")
    python = str(venv / "bin" / "python")
    site = Path(probe(python)["purelib"])
    lines = [f"import site; site.addsitedir({folder!r})" for folder in job["sites"]
             if not os.path.realpath(folder).startswith(os.path.realpath(venv) + os.sep)]
    (site / PTH_NAME).write_text("# the job's site folders, after this venv's own (preflight.commands.install)\n"
                                 + "\n".join(lines) + "\n")
    if not probe(python)["pip"]:
        subprocess.run([python, "-m", "ensurepip", "--default-pip"], stdout=sys.stderr, stderr=sys.stderr,
                       env=_child_environ(), check=False)
        if not probe(python)["pip"]:
            raise Refused(f"no pip in {job['executable']} nor ensurepip for {venv}: install pip into the job's "
                          "environment (or python3-venv on Debian)")
    return python


def _requirements(python: str) -> list[str]:
    """preflight's installed requirements other than torch and extras, markers kept for pip."""
    listed = subprocess.run([python, "-c", "import importlib.metadata as m, json; "
                             f"print(json.dumps(m.requires({DISTRIBUTION!r}) or []))"],
                            capture_output=True, text=True, env=_child_environ(), check=True)
    kept = []
    for line in json.loads(listed.stdout):
        marker = line.partition(";")[2].replace(" ", "")
        if "extra==" not in marker and _name(line).lower() != "torch":
            kept.append(line)
    return kept


def _name(requirement: str) -> str:
    name = requirement.split(";")[0].strip()
    for stop in "<>=!~[ (":
        name = name.split(stop)[0]
    return name


def install(package: str, python: str | None = None, venv: Path | None = None) -> str:
    """Install ``package`` (a pip argument) for the job's Python; return the Python that runs preflight.

    Raises:
        Refused: (exit 2) rather than install, upgrade or replace torch.
        Unverified: (exit 3) after the install, that Python would not load the job's torch as it was.
    """
    job_name = job_python(python)
    job = probe(job_name)
    torch = job["torch"]
    if torch is None:
        raise Refused(f"no torch importable by {job_name} ({KINDS[job['kind']]} at {job['prefix']}): preflight "
                      "measures the job's own torch and never installs one: run this with the Python your "
                      f"training job runs (--python or {JOB_PYTHON_VARIABLE}), or put torch in the image first")
    print(f"preflight: the job's Python is {job_name} ({KINDS[job['kind']]} at {job['prefix']}), "
          f"torch {torch['version']} at {os.path.dirname(torch['origin'])}", file=sys.stderr)
    if venv is None:
        if job["externally_managed"]:
            raise Refused(f"{job_name} is externally managed (PEP 668): add --venv DIR to install beside it, "
                          "sharing its torch")
        if not job["writable"]:
            raise Refused(f"{job['purelib']} is not writable: add --venv DIR to install beside it, sharing its "
                          "torch")
        if not job["pip"]:
            raise Refused(f"no pip in {job_name}: install pip into it, or add --venv DIR to install beside it")
        runner = job_name
    else:
        runner = _make_beside(job, venv.absolute())
    with tempfile.TemporaryDirectory(prefix="preflight-install-") as scratch:
        keep = Path(scratch) / "keep.txt"
        keep.write_text(f"torch=={torch['version']}\n")
        _pip(runner, ["--no-deps", "--force-reinstall", "--constraint", str(keep), package],
             f"pip could not install {package} into {runner}: see pip's message above")
        requirements = _requirements(runner)
        installed = probe(runner, tuple(_name(r) for r in requirements))["installed"]
        keep.write_text("".join(f"{name}=={version}\n" for name, version in
                                {"torch": torch["version"], **installed}.items()))
        if requirements:
            _pip(runner, ["--constraint", str(keep), *requirements],
                 f"pip could not install preflight's requirements without changing torch {torch['version']} or "
                 f"the installed {', '.join(sorted(installed)) or 'packages'} (each kept at its version): see "
                 "pip's message above; install what it names into the image first")
    after, job_after = probe(runner), probe(job_name)
    for who, state in ((runner, after), (job_name, job_after)):
        if state["torch"] != torch:
            raise Unverified(f"after the install {who} loads torch {state['torch']}, not the job's {torch}: "
                             "report this as a preflight bug")
    if not after["preflight"] or not os.path.realpath(after["preflight"]).startswith(
            os.path.realpath(after["purelib"]) + os.sep):
        raise Unverified(f"after the install {runner} imports preflight from {after['preflight']}, not from "
                         f"{after['purelib']}: report this as a preflight bug")
    print(f"preflight: installed into {after['prefix']}"
          + (f" (beside {job_name}, sharing its site-packages)" if venv else "")
          + f"; torch {torch['version']} kept at {os.path.dirname(torch['origin'])}", file=sys.stderr)
    return runner


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python3 -m preflight.commands.install",
                                     description="Install preflight for the job's Python, never touching its torch.")
    parser.add_argument("package", help="what pip installs: a wheel's path, a checkout, a git URL")
    parser.add_argument("--python", help=f"the job's Python (default ${JOB_PYTHON_VARIABLE}, else python3 on PATH)")
    parser.add_argument("--venv", type=Path, help="install beside the job's Python in this new venv, sharing its "
                                                  "site-packages (for PEP 668, read-only or shared images)")
    arguments = parser.parse_args(argv)
    try:
        print(install(arguments.package, arguments.python, arguments.venv))
    except Refused as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 2
    except Unverified as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
