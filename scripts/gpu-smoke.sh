#!/usr/bin/env bash
# Run preflight's GPU battery for real on a GPU node, in one call, and print it next to
# references measured in the same run. Needs python3 with the job's own torch. preflight's
# small dependencies (numpy, nvidia-ml-py, junit-xml and six, PyYAML) are taken from the image when
# it has them, else installed from local wheels, never from an index: GPU nodes often reach none.
#
#   scripts/gpu-smoke.sh [--wheels DIR] [--config FILE] [--work DIR] [--budget SECONDS] [--dry-run] [OUTDIR]
#                        (OUTDIR default: ./gpu-smoke-out)
#
#   --wheels DIR   wheels for the missing dependencies (pip --no-index --find-links DIR). Default:
#                  the wheels/ folder that scripts/gpu-smoke-bundle.sh puts beside scripts/, else
#                  whatever PIP_FIND_LINKS or pip's configuration names.
#   --config FILE  the battery to run (default: scripts/gpu-smoke.yaml).
#   --work DIR     where the generated data and the installed wheels go (default: OUTDIR), so that
#                  OUTDIR holds only the reports.
#   --budget SECONDS  the wall time the run must end within (default 540): the steps' bounds below
#                  must fit in it, or the run stops before measuring (exit 2).
#   --dry-run      check the imports, print the time budget below with the battery's own timeouts,
#                  and stop: exit 0 when it fits in the budget, 1 naming what does not. No GPU needed.
#
# It checks every import first (torch located, numpy, pynvml, six, junit_xml, yaml, preflight
# imported) and stops within seconds, exit 2, naming what is missing. Missing dependencies go to
# WORK/pydeps (pip --target, --no-deps), never into the image, so the image's torch is never replaced.
# This checkout's preflight is used, via PYTHONPATH; PYTHON names the interpreter (default python3).
# Its first lines say torch's version and CUDA runtime, then the driver and whether torch's device
# properties carry PCI ids (torch 2.2 and 2.3 do not bind them: NVML is then matched another way).
#
# Reports (report.json, report.xml, problems.txt, nvidia-smi.csv, topology.txt, transfer-reference.txt)
# go to OUTDIR; the generated data and pydeps go to WORK (--work, default OUTDIR).
#
# Budget: the run ends within --budget seconds (default 540, 9 minutes: a CI job or a batch
# allocation with a 10-minute limit), whatever the node does: every step is killed at its bound
# (coreutils timeout), and the bounds must add up to the budget:
#   step                                          bound (s)
#   imports: every module, torch located             20
#   wheels for what is missing (if any)              30
#   environment, GPUs and the ids probe             45
#   data for the pipeline check                      15
#   preflight run: the battery's own timeouts       340   (each check's timeout + 6 s kill grace, 20 s start)
#   nvidia-smi: three queries                        25
#   transfer against a plain copy loop               35
#   total                                           510   (default budget 540)
# A run whose steps overrun the budget stops before measuring (exit 2); --dry-run also adds up the
# battery's timeouts (scripts/gpu_smoke_budget.py) against the preflight step's bound.
#
# It stops at once, before any check, when torch sees no GPU (a CPU-only machine, a container
# started without --gpus): the battery would only train models on the CPU. Dependencies are
# settled first: nvidia-ml-py is optional, as it is for preflight (without it every NVML reading
# is reported as not measured, which fails the smoke test by name).
#
# Exit status: 0 when every step ran, torch saw a GPU, every row of the battery was measured and
# none failed or errored (a `warn` row that was measured does not fail it; a `skip` is a reading
# this GPU does not have) and transfer agrees with the reference within 10 %; 1 otherwise, with
# the reasons listed at the end, errors first, each naming its row (`cuda.matmul_error[cuda:0]`);
# 2 when torch, numpy, pyyaml, junit-xml or six is missing and no wheel provides it, or on a usage error.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
out=""
wheels=""
config=""
work=""
dry_run=""
LIMIT_S=540
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) [ $# -ge 2 ] || { echo "--wheels needs a folder" >&2; exit 2; }; wheels=$2; shift 2 ;;
        --wheels=*) wheels=${1#*=}; shift ;;
        --config) [ $# -ge 2 ] || { echo "--config needs a file" >&2; exit 2; }; config=$2; shift 2 ;;
        --config=*) config=${1#*=}; shift ;;
        --work) [ $# -ge 2 ] || { echo "--work needs a folder" >&2; exit 2; }; work=$2; shift 2 ;;
        --work=*) work=${1#*=}; shift ;;
        --budget) [ $# -ge 2 ] || { echo "--budget needs seconds" >&2; exit 2; }; LIMIT_S=$2; shift 2 ;;
        --budget=*) LIMIT_S=${1#*=}; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "unknown option $1; see $0 --help" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
[[ "$LIMIT_S" =~ ^[1-9][0-9]*$ ]] || { echo "--budget $LIMIT_S: give whole seconds, such as --budget 540" >&2; exit 2; }
# The budget (see the table above): seconds per step; they must add up to LIMIT_S (--budget).
IMPORTS_S=20 WHEELS_S=30 ENVIRONMENT_S=45 DATA_S=15 PREFLIGHT_S=340 NVIDIA_SMI_S=25 REFERENCE_S=35
budget=(imports:$IMPORTS_S wheels:$WHEELS_S environment:$ENVIRONMENT_S data:$DATA_S preflight:$PREFLIGHT_S
        nvidia-smi:$NVIDIA_SMI_S reference:$REFERENCE_S)
bounded() {  # bounded SECONDS COMMAND...: run it, killed at its bound (then 5 s for it to go); 124 when killed
    timeout -k 5 "$@"
}
# paths are the caller's, taken before moving to the checkout
if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "--wheels $wheels: no such folder" >&2; exit 2; }
    wheels=$(cd "$wheels" && pwd)
fi
if [ -n "$config" ]; then
    [ -f "$config" ] || { echo "--config $config: no such file" >&2; exit 2; }
    config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
fi
out=${out:-gpu-smoke-out}
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=${work:-$out}
mkdir -p "$work" && work=$(cd "$work" && pwd)
rm -f "$out/report.json" "$out/report.xml" "$out/problems.txt"  # an earlier run's verdict must not outlive this one
cd "$(dirname "$0")/.."
config=${config:-$PWD/scripts/gpu-smoke.yaml}
[ -z "$wheels" ] && [ -d wheels ] && wheels=$PWD/wheels  # the layout gpu-smoke-bundle.sh writes
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
errors=()    # `error` verdicts: crashes and timeouts inside checks
problems=()  # every other reason this smoke test fails: rows failed or not measured, steps that failed

echo "== imports (bound ${IMPORTS_S}s, wheels ${WHEELS_S}s)"
# torch located and its build read from its version.py, without importing it (that takes seconds: the
# environment step does it); the small modules are imported for real, as preflight will
deadline=$((SECONDS + IMPORTS_S))
bounded "$IMPORTS_S" "$py" - <<'PY'
import sys

from preflight.host.gpu import torch_build

build = torch_build()
if build is None:
    print(f"python {sys.version.split()[0]}: torch is not installed")
    sys.exit(1)
print(f"python {sys.version.split()[0]}, torch {build.get('__version__')}, CUDA runtime {build.get('cuda')}, "
      f"HIP {build.get('hip')}")
PY
case $? in
    0) ;;
    124) echo "cannot run: reading torch's build took over ${IMPORTS_S}s (a hung filesystem under $py?)"; exit 2 ;;
    *) echo "cannot run: torch missing from $py: run this with the job's own python and torch (PYTHON=...)"; exit 2 ;;
esac

missing_packages() {  # the distributions whose modules this python cannot import, one per line
    bounded "$((deadline > SECONDS ? deadline - SECONDS : 1))" "$py" - <<'PY'
import importlib
for module, package in (("pynvml", "nvidia-ml-py"), ("six", "six"), ("junit_xml", "junit-xml"), ("yaml", "pyyaml"),
                        ("numpy", "numpy")):
    try:
        importlib.import_module(module)
    except ImportError:
        print(package)
PY
}
missing=$(missing_packages | xargs)
if [ -n "$missing" ]; then
    if [ -n "$wheels" ]; then source_=$wheels; else source_="PIP_FIND_LINKS (${PIP_FIND_LINKS:-unset}) or the find-links in pip.conf"; fi
    echo "missing here: $missing; installing from $source_ into $work/pydeps"
    echo "(pip --no-index --no-deps --target: no index is asked, nothing else is installed, the image's torch stays)"
    rm -rf "$work/pydeps"
    from=()
    [ -n "$wheels" ] && from=(--find-links "$wheels")
    wheels_deadline=$((SECONDS + WHEELS_S))
    for package in $missing; do  # one at a time, so one without a wheel does not stop the others
        left=$((wheels_deadline - SECONDS))
        [ "$left" -gt 0 ] || { echo "  pip: out of the ${WHEELS_S}s for wheels before $package"; break; }
        bounded "$left" "$py" -m pip install -q --no-index --no-deps --target "$work/pydeps" ${from[@]+"${from[@]}"} \
            "$package" 2>&1 | grep -v "^WARNING: Target directory" | tail -1 | sed 's/^/  pip: /'
    done
    export PYTHONPATH="$work/pydeps:$PYTHONPATH"
    deadline=$((SECONDS + IMPORTS_S))
    still=$(missing_packages | xargs)
    required=$(xargs -n1 <<<"$still" | grep -vx nvidia-ml-py | xargs)
    if [ -n "$required" ]; then
        echo "cannot run: $still missing from $py, with no wheel in $source_"
        echo "fix: where PyPI is reachable run scripts/gpu-smoke-bundle.sh BUNDLE, copy BUNDLE to this node and run" \
             "BUNDLE/scripts/gpu-smoke.sh (it finds BUNDLE/wheels); or pass --wheels DIR (pip download" \
             "--only-binary=:all: $still for this python); or pip install $still"
        exit 2
    fi
    if [ -n "$still" ]; then
        echo "nvidia-ml-py missing, with no wheel in $source_: preflight runs without it, and every NVML reading" \
             "(driver, ECC, row remapping, PCIe link, clocks) will be reported as not measured, failing this smoke" \
             "test; pass --wheels DIR with its wheel to read them"
    fi
fi
bounded "$IMPORTS_S" "$py" -c "import preflight; print('preflight from', preflight.__file__)" \
    || { echo "cannot run: preflight does not import from $PWD with $py (see above)"; exit 2; }

if [ -n "$dry_run" ]; then
    echo "== dry run: the time budget of this run, with the battery's timeouts (${config#"$PWD"/})"
    "$py" scripts/gpu_smoke_budget.py "$config" "$LIMIT_S" "${budget[@]}"
    exit $?
fi
steps_s=0
for step in "${budget[@]}"; do steps_s=$((steps_s + ${step#*:})); done
if [ "$steps_s" -gt "$LIMIT_S" ]; then
    echo "cannot run within --budget ${LIMIT_S}s: its steps are bounded at ${steps_s}s in all; raise --budget" \
         "(--dry-run shows the table)"
    exit 2
fi

echo "== environment and GPUs torch sees (preflight.host.gpu, the checks' own view; bound ${ENVIRONMENT_S}s)"
# No GPU: stop here. The battery would fail every GPU row for the same reason after minutes of
# training models on the CPU, and say nothing more.
bounded "$ENVIRONMENT_S" "$py" - <<'PY'
import sys

from preflight.host import nvml
from preflight.host.gpu import TorchCuda

session = nvml.open_session(nvml.library())
try:
    system = nvml.system(session)
finally:
    nvml.close(session)
if system.driver_version:
    print(f"driver {system.driver_version} (CUDA {system.cuda_driver_version}), from NVML")
else:
    print(f"driver unknown: {system.reason}")
view = TorchCuda().view()
if not view.devices:
    print(f"cannot run: no GPU visible: {view.reason}")
    print("fix: run this on a GPU node, in the job's image with its GPUs given to the container "
          "(--gpus all, or the pod's nvidia.com/gpu limit)")
    sys.exit(1)
unplaced = [f"cuda:{d.index}" for d in view.devices if not d.bus_id]
if unplaced:
    print(f"PCI ids in torch's device properties: absent for {', '.join(unplaced)} (torch {view.torch_version} does "
          f"not bind pci_bus_id): NVML is matched to torch's GPUs another way, which the cuda rows' method names")
else:
    print(f"PCI ids in torch's device properties: present (torch {view.torch_version})")
for device in view.devices:
    print(f"cuda:{device.index} {device.name}, compute capability {device.compute_capability}, PCI {device.bus_id or '?'}")
# The probe: what this torch really binds, beside NVML's own view, so the ids preflight matches on are seen
import os
try:
    import torch

    props = torch.cuda.get_device_properties(0)
    cu_uuid = getattr(props, "uuid", None)
    raw = getattr(cu_uuid, "bytes", None)
    print(f"probe: props.uuid is {type(cu_uuid).__name__}, str {str(cu_uuid)!r}; props.uuid.bytes is "
          f"{type(raw).__name__}{f' of {len(raw)} {type(raw[0]).__name__}' if raw is not None and len(raw) else ''}")
    print(f"probe: PCI ids bound: {[hasattr(props, f'pci_{p}_id') for p in ('domain', 'bus', 'device')]}")
except Exception as error:  # noqa: BLE001  a probe prints what it finds
    print(f"probe: torch's device properties: {type(error).__name__}: {error}")
try:
    import pynvml
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        print(f"probe: NVML GPU {i}: uuid {pynvml.nvmlDeviceGetUUID(handle)}, bus id "
              f"{bus.decode() if isinstance(bus, bytes) else bus}")
    pynvml.nvmlShutdown()
except Exception as error:  # noqa: BLE001  a probe prints what it finds
    print(f"probe: NVML: {type(error).__name__}: {error}")
for device in view.devices:
    print(f"probe: preflight's view of cuda:{device.index}: uuid {device.uuid or '(none)'}, bus id {device.bus_id or '(none)'}")
try:
    print(f"probe: /proc/driver/nvidia/gpus lists {sorted(os.listdir('/proc/driver/nvidia/gpus'))}")
except OSError as error:
    print(f"probe: /proc/driver/nvidia/gpus: {error}")
try:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        record = os.read(fd, 8192)
        print(f"probe: /dev/kmsg readable: first record of {len(record)} bytes")
    except BlockingIOError:
        print("probe: /dev/kmsg readable, and empty")
    finally:
        os.close(fd)
except OSError as error:
    print(f"probe: /dev/kmsg not readable: {error}")
PY
case $? in
    0) ;;
    124) echo "cannot run: importing torch and starting CUDA took over ${ENVIRONMENT_S}s: see dmesg (Xid) and nvidia-smi"
         exit 1 ;;
    *) exit 1 ;;
esac

echo "== data and model for the model and pipeline checks (bound ${DATA_S}s)"
# An ImageNet-shaped folder for the pipeline's DataLoader: 1024 files of 110 kB (ImageNet's median
# JPEG) in 16 class folders, enough to be read as a dataset rather than a few cached files. Kept
# between runs in OUTDIR; the bytes are random, since the pipeline reads files, it does not decode them.
data="$work/imagenet-shaped"
bounded "$DATA_S" "$py" - "$data" <<'PY' || problems+=("could not write the pipeline's data under $data in ${DATA_S}s")
import os, sys

root, files, size = sys.argv[1], 1024, 110_000
for index in range(files):
    folder = os.path.join(root, f"n{index % 16:08d}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{index:05d}.JPEG")
    if not os.path.isfile(path) or os.path.getsize(path) != size:
        with open(path, "wb") as out:
            out.write(os.urandom(size))
print(f"{files} files of {size // 1000} kB under {root}")
PY
export SMOKE_DATA="$data"
# resnet50 needs torchvision, which pins one torch: use it where the image has a matching one, else the
# built-in tiny CNN (the checks then say the step runs, not how fast ResNet-50 trains)
if bounded "$DATA_S" "$py" -c "import torchvision.models" >/dev/null 2>&1; then
    export SMOKE_MODEL=resnet50
else
    export SMOKE_MODEL=tiny
    echo "torchvision is not importable here: model and pipeline train the built-in tiny CNN, not resnet50" \
         "(pip install --no-deps torchvision==0.<torch minor + 15>.* pillow: keeps the image's torch)"
fi
echo "model: $SMOKE_MODEL"

echo "== preflight: cuda, transfer, p2p, model, pipeline, xid (thresholds in ${config#"$PWD"/}; bound ${PREFLIGHT_S}s)"
# SIGTERM at the bound: preflight then reports the checks not run as errors and still writes its reports
bounded "$PREFLIGHT_S" "$py" -m preflight run -c "$config" --json "$out/report.json" --junit-xml "$out/report.xml"
gate=$?
[ "$gate" -eq 124 ] && problems+=("preflight run was stopped at its ${PREFLIGHT_S}s bound: lower the battery's timeouts")
echo "preflight exit status: $gate (1: a threshold missed or a check errored; 2: usage; 3: a preflight bug)"
[ "$gate" -gt 1 ] && [ "$gate" -ne 124 ] && problems+=("preflight itself failed with exit status $gate (usage or internal error; see above)")

echo "== preflight results from $out/report.json, errors first"
if [ -s "$out/report.json" ]; then
    if "$py" scripts/gpu_smoke_report.py "$out/report.json" "$out/problems.txt"; then
        while IFS=$'\t' read -r kind text; do
            if [ "$kind" = error ]; then errors+=("$text"); else problems+=("$text"); fi
        done < "$out/problems.txt"
    else
        problems+=("$out/report.json could not be read")
    fi
else
    problems+=("preflight wrote no report to $out/report.json")
fi

echo "== reference for cuda: nvidia-smi's view of the same GPUs (bound ${NVIDIA_SMI_S}s)"
if command -v nvidia-smi >/dev/null; then
    fields=index,name,pci.bus_id,driver_version,persistence_mode,mig.mode.current,ecc.mode.current
    fields=$fields,ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.gen.max,pcie.link.width.max
    fields=$fields,temperature.gpu,enforced.power.limit,clocks_throttle_reasons.active
    # an older nvidia-smi rejects the whole query for one unknown field: fall back to the basic ones
    each=$((NVIDIA_SMI_S / 3))
    bounded "$each" nvidia-smi --query-gpu="$fields" --format=csv > "$out/nvidia-smi.csv" 2>&1 \
        || bounded "$each" nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,temperature.gpu --format=csv \
            > "$out/nvidia-smi.csv"
    cat "$out/nvidia-smi.csv"
    bounded "$each" nvidia-smi -q -d ROW_REMAPPER | grep -E "Pending|Remapping Failure" | tee -a "$out/nvidia-smi.csv"
    bounded "$each" nvidia-smi topo -m | tee "$out/topology.txt"
else
    echo "nvidia-smi not in this image: compare cuda.* in $out/report.json with the host's nvidia-smi"
fi

echo "== transfer vs a plain torch copy loop timed with events (target ratio 0.90-1.10; bound ${REFERENCE_S}s)"
bounded "$REFERENCE_S" "$py" bench/transfer_reference.py 2>&1 | tee "$out/transfer-reference.txt"
reference=${PIPESTATUS[0]}
if [ "$reference" -ne 0 ]; then
    why=$(grep -m1 -E "^no GPU measurement|OUTSIDE|NOT MEASURED|Error" "$out/transfer-reference.txt")
    problems+=("bench/transfer_reference.py exited $reference${why:+: $why}")
fi

status=0
if [ ${#errors[@]} -gt 0 ] || [ ${#problems[@]} -gt 0 ]; then status=1; fi
echo "== done: files in $out, status $status, ${SECONDS}s of the ${LIMIT_S}s budget"
if [ "$status" -ne 0 ]; then
    echo "the smoke test failed:"
    for line in ${errors[@]+"${errors[@]}"} ${problems[@]+"${problems[@]}"}; do echo "  $line"; done
fi
exit "$status"
