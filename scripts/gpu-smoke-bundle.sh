#!/usr/bin/env bash
# Prepare, in one folder, everything scripts/gpu-smoke.sh needs on a GPU node that reaches no
# package index: this project's files and wheels of its small dependencies. torch is never
# bundled: the node's own torch is the one under test.
#
#   scripts/gpu-smoke-bundle.sh [--pythons "3.9 3.10 3.11 3.12 3.13 3.14"] [--archs "x86_64 aarch64"] [OUTDIR]
#                                                                 (OUTDIR default: ./gpu-smoke-bundle)
# then, for example:
#   tar czf bundle.tgz -C OUTDIR .          and copy bundle.tgz to the node (scp, kubectl cp); there:
#   mkdir bundle && tar xzf bundle.tgz -C bundle && bundle/scripts/gpu-smoke.sh
# gpu-smoke.sh finds bundle/wheels by itself and installs from it with --no-index.
#
# Wheels come from pip's own sources (PyPI, PIP_INDEX_URL or PIP_FIND_LINKS, as configured): the
# pure-Python nvidia-ml-py, junit-xml and six once, and PyYAML for each CPython version and
# architecture listed (manylinux2014). What pip cannot get (PIP_NO_INDEX=1, no network) is
# packed from the distribution installed in this Python instead (scripts/wheel_from_installed.py;
# PYTHON names it, default python3), which serves nodes with its CPython version and architecture.
#
# Exit status: 0 when OUTDIR/wheels holds every pure-Python wheel and a PyYAML for this Python
# (a PyYAML missing for another version or architecture is a warning that names it); 1 otherwise.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
pythons="3.9 3.10 3.11 3.12 3.13 3.14"
archs="x86_64 aarch64"
out=gpu-smoke-bundle
while [ $# -gt 0 ]; do
    case "$1" in
        --pythons) [ $# -ge 2 ] || { echo "--pythons needs a list" >&2; exit 2; }; pythons=$2; shift 2 ;;
        --archs) [ $# -ge 2 ] || { echo "--archs needs a list" >&2; exit 2; }; archs=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "unknown option $1; see $0 --help" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
wheels="$out/wheels"
mkdir -p "$wheels"

echo "== the project: preflight/, scripts/, bench/ and their metadata into $out"
tar -cf - --exclude=__pycache__ --exclude='*.pyc' preflight scripts bench pyproject.toml README.md thresholds.yaml \
    | tar -xf - -C "$out" || { echo "copying the project failed"; exit 1; }

echo "== pure-Python wheels: nvidia-ml-py, junit-xml, six"
download() {  # pip's last line when it fails (which package, why); nothing when it succeeds
    local log
    log=$("$py" -m pip download -q --no-deps --only-binary=:all: --dest "$wheels" "$@" 2>&1) \
        || echo "  pip: $(tail -1 <<<"$log")"
}
download nvidia-ml-py "junit-xml>=1.9" six

echo "== PyYAML for CPython $pythons on $archs"
for version in $pythons; do
    for arch in $archs; do
        download --python-version "$version" --implementation cp --abi "cp${version/./}" \
                 --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" "pyyaml>=5.1"
    done
done

echo "== what this Python ($("$py" -c 'import sys; print(sys.version.split()[0])')) would install from $wheels"
has() { "$py" -m pip download -q --no-index --no-deps --only-binary=:all: --find-links "$wheels" \
        --dest "$(mktemp -d)" "$1" >/dev/null 2>&1; }
packed=()
for package in nvidia-ml-py junit-xml six pyyaml; do
    has "$package" && continue
    echo "pip could not get $package here: packing the installed one"
    "$py" scripts/wheel_from_installed.py "$wheels" "$package" && packed+=("$package")
done
missing=()
for package in nvidia-ml-py junit-xml six pyyaml; do has "$package" || missing+=("$package"); done

echo "== bundle in $out:"
ls -1 "$wheels" | sed 's/^/  wheels\//'
unavailable=()
for version in $pythons; do
    for arch in $archs; do
        abi="cp${version/./}"
        ls "$wheels" | grep -qiE "^pyyaml-[^-]+-$abi-$abi-.*_$arch(\.|\.whl)" || unavailable+=("CPython $version on $arch")
    done
done
for target in ${unavailable[@]+"${unavailable[@]}"}; do
    echo "warning: no PyYAML wheel for $target: a node with it needs PyYAML in its image (pip could not download one here)"
done
[ ${#packed[@]} -gt 0 ] && echo "packed from this Python's installed distributions: ${packed[*]}"
if [ ${#missing[@]} -gt 0 ]; then
    echo "incomplete: no wheel of ${missing[*]} for this Python, from pip or installed here: run where PyPI is" \
         "reachable, or point PIP_FIND_LINKS at a folder holding them"
    exit 1
fi
echo "copy $out to the GPU node and run its scripts/gpu-smoke.sh there (tar czf bundle.tgz -C $out .)"
