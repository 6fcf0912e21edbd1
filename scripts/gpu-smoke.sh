#!/usr/bin/env bash
# Run preflight's GPU battery for real on a GPU node and print it next to references
# measured in the same run. Needs only what a CUDA PyTorch image already has (python3,
# torch, pip) plus this package's small dependencies (nvidia-ml-py, junit-xml, pyyaml), which
# it pip-installs only when missing. This checkout's preflight is used, via PYTHONPATH.
#
#   scripts/gpu-smoke.sh [OUTDIR]        (default OUTDIR: ./gpu-smoke-out)
#
# Exit status: 0 when every step ran and transfer agrees with the reference within 10%.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-smoke-out}"
mkdir -p "$out"
status=0
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== environment"
"$py" - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, HIP {getattr(torch.version, 'hip', None)}, "
      f"GPUs visible: {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
PY
if ! "$py" -c "import pynvml, junit_xml, yaml, numpy" 2>/dev/null; then
    echo "installing preflight's small dependencies (never torch: the image's torch is the one under test)"
    "$py" -m pip install -q nvidia-ml-py "junit-xml>=1.9" "pyyaml>=5.1" numpy || { echo "pip install failed"; exit 2; }
fi
"$py" -c "import preflight, sys; print('preflight from', preflight.__file__)"

echo "== preflight: cuda, transfer, p2p (thresholds in scripts/gpu-smoke.yaml)"
"$py" -m preflight run -c scripts/gpu-smoke.yaml --json "$out/report.json" --junit-xml "$out/report.xml"
gate=$?
echo "preflight exit status: $gate (1 = a threshold missed; see the table above)"
if [ "$gate" -gt 1 ]; then status=1; echo "preflight itself failed (usage or internal error)"; fi

echo "== reference for cuda: nvidia-smi's view of the same GPUs"
if command -v nvidia-smi >/dev/null; then
    fields=index,name,pci.bus_id,driver_version,persistence_mode,mig.mode.current,ecc.mode.current
    fields=$fields,ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.gen.max,pcie.link.width.max
    fields=$fields,temperature.gpu,enforced.power.limit,clocks_throttle_reasons.active
    # an older nvidia-smi rejects the whole query for one unknown field: fall back to the basic ones
    nvidia-smi --query-gpu="$fields" --format=csv > "$out/nvidia-smi.csv" 2>&1 \
        || nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,temperature.gpu --format=csv > "$out/nvidia-smi.csv"
    cat "$out/nvidia-smi.csv"
    nvidia-smi -q -d ROW_REMAPPER | grep -E "Pending|Remapping Failure" | tee -a "$out/nvidia-smi.csv"
    nvidia-smi topo -m | tee "$out/topology.txt"
else
    echo "nvidia-smi not in this image: compare cuda.* in $out/report.json with the host's nvidia-smi"
fi

echo "== preflight values from the run above"
"$py" - "$out/report.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"{r['id']:<48} {r['verdict']:<5} {r['value'] if r['value'] is not None else '-'} {r['unit']}")
PY

echo "== transfer vs a plain torch copy loop timed with events (target ratio 0.90-1.10)"
"$py" bench/transfer_reference.py | tee "$out/transfer-reference.txt"
status=$((status | ${PIPESTATUS[0]}))
echo "== done: files in $out, status $status"
exit "$status"
