#!/usr/bin/env bash
# Mutation testing of the measuring and judging core (issue 17) with mutmut 3.
#
#   scripts/mutation.sh                        a fresh run over every module of [tool.mutmut] in pyproject.toml
#   scripts/mutation.sh "preflight.verdict*"   the mutants of one module, reusing earlier results
#
# Each mutant runs only the fast tests that reach the mutated function (pyproject lists the test
# files), so the full run takes about 20 minutes on 2 CPUs. Prints the score per module and the
# survivors; docs/mutation.md explains each survivor. Needs the mutation extra:
#   .venv/bin/pip install -e '.[test,mutation]'
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
"$python" -c "import mutmut" 2>/dev/null || {
    echo "scripts/mutation.sh: mutmut is not installed: $python -m pip install -e '.[test,mutation]'" >&2; exit 2; }
[ $# -eq 0 ] && rm -rf mutants  # a full run starts clean, so its score does not mix in stale results
start=$(date +%s)
"$python" -m mutmut run "$@" > mutation.log 2>&1 || { tail -c 2000 mutation.log >&2; exit 1; }
echo "mutmut run: $(( $(date +%s) - start ))s (spinner output in mutation.log)"
"$python" scripts/mutation_score.py --survivors
