#!/usr/bin/env bash
# The numbers issues 5 and 6 name, in one visit to the GPU machine, after its GPU tests:
#   bash benchmarks/issue_numbers.sh [OUT]      (OUT: $OUT, else ./issue-numbers)
# 1. `pytest -m gpu` (every GPU test);
# 2. issue 6, deep-K: the deepk set against XLA and cuBLAS, every shape also through JAX in XLA's
#    own timing loop (the like-for-like ratio, "jtblas through JAX ÷ XLA, same jitted loop");
# 3. issue 6, decode: the 32 rows of llm.csv with M <= 16 against XLA, cuBLAS and a copy, every
#    shape also through JAX (XLA and jtblas through JAX timed in three rounds in turn, medians);
# 4. issue 5: the MLP block's training step, jtblas.nn.Dense vs flax.linen.Dense (five rounds in
#    turn, the median ratio).
# Each step has a time limit (10 minutes in all, ~7 used; the GPU machine allows 10 per command; the benches
# get a --time-budget inside it, so they still write their reports) and writes under OUT; a failing
# step does not stop the next. At the end OUT holds five files (the GPU machine sends back at most
# eight): gpu_tests.log, deepk-report.md, decode-report.md, mlp_block.json and raw.tgz (every log,
# results.json and plot).
set -u
out=${1:-${OUT:-issue-numbers}}
mkdir -p "$out"
noise='absl\|^I0000\|^W0000\|^E0000\|warn'
step() {  # step NAME SECONDS COMMAND...: run COMMAND with a limit, log to OUT/NAME.log, print its tail
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date -u +%H:%M:%S) UTC)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   exit $?"
    grep -v -i "$noise" "$out/$name.log" | tail -n 3
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
step gpu_tests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests
step deepk 140 python3 -m jtblas bench --shapes deepk --all --no-oracle --contenders jtblas,xla,cublas \
    --jax-checks 8 --time-budget 135 --out "$out/deepk"
step decode 225 python3 -m jtblas bench --shapes llm --max-m 16 --all --no-oracle \
    --contenders jtblas,xla,cublas --jax-checks 32 --time-budget 210 --out "$out/decode"
step mlp_block 80 python3 benchmarks/mlp_block.py --rounds 5 --json "$out/mlp_block.json"
for group in deepk decode; do
    [ -f "$out/$group/summary.json" ] && python3 -c "import json, sys; print('$group', json.load(open(sys.argv[1])))" "$out/$group/summary.json" | cut -c1-600
    [ -f "$out/$group/report.md" ] && cp "$out/$group/report.md" "$out/$group-report.md"
done
raw=$(cd "$out" && ls -d deepk decode deepk.log decode.log mlp_block.log 2>/dev/null)
[ -n "$raw" ] && (cd "$out" && tar czf raw.tgz $raw && rm -rf $raw)
