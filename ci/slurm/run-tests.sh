#!/usr/bin/env bash
# Run the Slurm integration test (tests/test_slurm.py) against a real one-node Slurm on this machine.
#
# Installs Debian's slurm-wlm and munge when they are missing (root, Debian or Ubuntu; about 20 s and
# 150 MB on a warm mirror), then runs the test, which starts munged, slurmctld and slurmd from a
# slurm.conf in a temporary directory and stops them after. Nothing is installed as a service, and
# no file under /etc/slurm or /etc/munge is read or written.
#
#   sudo ci/slurm/run-tests.sh            # from the repository root; extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    [ "$(id -u)" -eq 0 ] || { echo "ci/slurm/run-tests.sh: slurm-wlm and munge are missing; run as root to install them" >&2; exit 2; }
    start=$(date +%s)
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null; }
    install || { apt-get update >/dev/null && install; }
    echo "ci/slurm/run-tests.sh: installed slurm-wlm and munge in $(( $(date +%s) - start ))s"
fi
exec "$python" -m pytest -q -p no:cacheprovider tests/test_slurm.py "$@"
