#!/bin/sh
# Slurm Prolog: a fast preflight gate on each node of a new job, before its first step starts.
#
# slurmd runs this as root (SlurmdUser) on every allocated node. Slurm drains the node ("Prolog error")
# and requeues the job held on ANY nonzero exit (`Prolog` in slurm.conf(5)): no exit code means "the job's
# fault". So this script exits nonzero only when the node is at fault, and stops the job itself otherwise
# (docs/slurm.md, "Which exit does what"):
#
#   gate passed (preflight exit 0) ........ exit 0: the job starts
#   gate failed (1 with a report), or
#     preflight killed by a signal ........ exit with that code: Slurm drains the node, requeues the job held
#   the job's mistake: its --comment names
#     no installed gate, or no gate name .. `scancel`, exit 0: the job ends CANCELLED; the node stays in service
#   the gate file is wrong (2), preflight
#     crashed (3: a bug), or PREFLIGHT is
#     not a command that runs (126, 127, or
#     1 without a report) ................. `scontrol requeuehold`, exit 0: the job waits, held, for the
#                                           administrator's fix and `scontrol release`; the node stays in service
#
# In the last two the reason goes to the job's AdminComment (`scontrol show job`, `sacct -o AdminComment`)
# and this run's <node>-job<id>-prolog.log: a Prolog's output never reaches the job, and slurmd logs it only
# when the prolog fails (only a TaskProlog's `print` lines reach the job, and that runs as the user, per
# task). If the controller cannot be told to stop the job, the script exits nonzero after all: a job must
# never run on a node that was not gated.
#
# Which gate: the job may name one with `sbatch --comment=preflight=NAME` ($PREFLIGHT_CONFIG_DIR/NAME.yaml,
# NAME of letters, digits, - and _); otherwise $PREFLIGHT_CONFIG_DIR/prolog.yaml. Only files the
# administrator installed: the prolog runs as root, and a thresholds file can name code to import.
# Keep the gate to what a node answers in seconds (shm, cuda, a short transfer): Slurm waits for it
# before the job starts, up to PrologEpilogTimeout.
#
# slurm.conf: PrologFlags=Alloc,DeferBatch, so that a job this script stops never starts (stop_job below).
#
# Settings (environment): PREFLIGHT (the preflight command), PREFLIGHT_CONFIG_DIR (/etc/preflight),
# PREFLIGHT_REPORT_DIR (/var/log/preflight), PREFLIGHT_LOCK and PREFLIGHT_LOCK_WAIT (docs/slurm.md),
# SCONTROL and SCANCEL (default: scontrol and scancel on PATH).
set -u
preflight=${PREFLIGHT:-preflight}
configs=${PREFLIGHT_CONFIG_DIR:-/etc/preflight}
reports=${PREFLIGHT_REPORT_DIR:-/var/log/preflight}
scontrol=${SCONTROL:-scontrol}
scancel=${SCANCEL:-scancel}
node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-unknown}

mkdir -p "$reports" || { echo "preflight prolog: job $job on $node: cannot create $reports" >&2; exit 1; }
base="$reports/$node-job$job-prolog"

# stop_job cancel|hold MESSAGE: end the job (cancel) or put it back in the queue held (hold) with MESSAGE
# as its AdminComment, and exit 0 so that Slurm leaves the node in service.
#
# Only with `PrologFlags=Alloc,DeferBatch` does the controller send the batch script after every node's
# prolog has ended, and so never for a job stopped here. Without it slurmd starts the script as soon as
# this prolog exits, unless the controller's kill (sent on its own thread) has reached it first: without
# DeferBatch, 4 of about 12 runs of tests/test_slurm.py started one of their seven stopped jobs' scripts,
# killed about 40 ms later. The 1 s wait below narrows that window where DeferBatch is not set; it is no
# guarantee.
stop_job() {
    if [ "$1" = cancel ]; then
        said="preflight: $2: the job was cancelled; node $node stays in service"
    else
        said="preflight: $2: the job is held until \`scontrol release $job\`; node $node stays in service"
    fi
    echo "$said" >>"$base.log"
    echo "$said" >&2
    $scontrol update jobid="$job" admincomment="$said" >>"$base.log" 2>&1
    if [ "$1" = hold ] && $scontrol requeuehold "$job" >>"$base.log" 2>&1; then sleep 1; exit 0; fi
    # an interactive job (srun, salloc) cannot be requeued: cancel it
    $scancel "$job" >>"$base.log" 2>&1 && { sleep 1; exit 0; }
    # Stopped already (this job's prolog on another of its nodes got there first)? Else the controller is not
    # answering: fail, so that the job does not run ungated.
    state=$($scontrol show job "$job" -o 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $state in
        ""|RUNNING|CONFIGURING)
            echo "preflight prolog: job $job on $node: could not stop the job (state '$state'):" \
                "exit 1, Slurm drains the node" >&2
            exit 1 ;;
    esac
    exit 0
}

name=prolog
case " ${SLURM_JOB_COMMENT:-} " in
    *" preflight="*)
        name=${SLURM_JOB_COMMENT#*preflight=}
        name=${name%% *}
        case $name in
            ""|*[!A-Za-z0-9_-]*)
                stop_job cancel "--comment preflight=$name is not a gate name (letters, digits, - and _)" ;;
        esac
        if [ ! -f "$configs/$name.yaml" ]; then
            installed=$(cd "$configs" 2>/dev/null &&
                for gate in *.yaml; do [ -f "$gate" ] && printf '%s, ' "${gate%.yaml}"; done)
            installed=${installed%, }
            stop_job cancel "--comment preflight=$name names no installed gate ($configs/$name.yaml does not exist;\
 installed: ${installed:-none}): fix the job's --comment"
        fi ;;
esac

rm -f "$base.json"  # a requeued job runs its prolog again under the same id: judge this run's report only
# PREFLIGHT may be a command with arguments ("/opt/venv/bin/python -m preflight"): split on purpose.
# shellcheck disable=SC2086
$preflight run -c "$configs/$name.yaml" --json "$base.json" --junit-xml "$base.xml" >"$base.log" 2>&1
code=$?
# preflight's one-line reason for exit 2 or 3 is its last line on stderr (cut: AdminComment is for people)
last=$(tail -n 1 "$base.log" 2>/dev/null | cut -c 1-400)
fix="fix PREFLIGHT in the prolog's environment"
case $code in
    0) exit 0 ;;
    1) [ -f "$base.json" ] ||  # preflight writes its report on every verdict: without one, it never judged the node
        stop_job hold "the preflight command ($preflight) exited 1 without a report: $last: $fix" ;;
    2) stop_job hold "gate $configs/$name.yaml: a configuration error (exit 2): $last" ;;
    3) stop_job hold "preflight crashed (exit 3, a bug in preflight): $last" ;;
    126|127) stop_job hold "the preflight command ($preflight) could not be started (exit $code): $last: $fix" ;;
esac
echo "preflight prolog: job $job on $node: gate $configs/$name.yaml exited $code: see $base.log" >&2
exit "$code"
