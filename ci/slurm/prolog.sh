#!/bin/sh
# Slurm Prolog: a fast preflight gate on each node of a new job, before its first step starts.
#
# slurmd runs this as root (SlurmdUser) on every allocated node. A nonzero exit makes Slurm drain
# the node (reason "Prolog error") and requeue the job held (see `Prolog` in slurm.conf(5)), so the
# job never starts on a node that fails the gate; the reports below say why.
#
# Which gate: the job may name one with `sbatch --comment=preflight=NAME` ($PREFLIGHT_CONFIG_DIR/NAME.yaml,
# NAME of letters, digits, - and _); otherwise $PREFLIGHT_CONFIG_DIR/prolog.yaml. Only files the
# administrator installed: the prolog runs as root, and a thresholds file can name code to import.
# Keep the gate to what a node answers in seconds (shm, cuda, a short transfer): Slurm waits for it
# before the job starts, up to PrologEpilogTimeout.
#
# Settings (environment): PREFLIGHT (the preflight command), PREFLIGHT_CONFIG_DIR (/etc/preflight),
# PREFLIGHT_REPORT_DIR (/var/log/preflight), PREFLIGHT_LOCK and PREFLIGHT_LOCK_WAIT (docs/slurm.md).
set -u
preflight=${PREFLIGHT:-preflight}
configs=${PREFLIGHT_CONFIG_DIR:-/etc/preflight}
reports=${PREFLIGHT_REPORT_DIR:-/var/log/preflight}
node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-unknown}

name=prolog
case " ${SLURM_JOB_COMMENT:-} " in
    *" preflight="*)
        name=${SLURM_JOB_COMMENT#*preflight=}
        name=${name%% *}
        case $name in
            ""|*[!A-Za-z0-9_-]*)
                echo "preflight prolog: job $job: --comment preflight=$name is not a gate name (letters, digits, - and _)" >&2
                exit 2 ;;
        esac ;;
esac

mkdir -p "$reports" || exit 2
base="$reports/$node-job$job-prolog"
# PREFLIGHT may be a command with arguments ("/opt/venv/bin/python -m preflight"): split on purpose.
# shellcheck disable=SC2086
$preflight run -c "$configs/$name.yaml" --json "$base.json" --junit-xml "$base.xml" >"$base.log" 2>&1
code=$?
if [ "$code" -ne 0 ]; then
    echo "preflight prolog: job $job on $node: gate $configs/$name.yaml exited $code: see $base.log" >&2
fi
exit "$code"
