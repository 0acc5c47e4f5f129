#!/usr/bin/env bash
# bench_report.sh — end-to-end check of `make bench`'s driver (bench/report.py) without the
# benchmark venv: a tiny cifar10dvs_vgg configuration (T 1, batch 1, 1 step, 1 round) with
#   * the venv missing: the SpikingJelly rows say "not installed ... make bench-deps", no number;
#   * a venv whose python fails to import its peer (a stand-in printing ModuleNotFoundError and
#     exiting 1): the rows carry that error, no number, and it is tried once only;
#   * spikemesh and Debian's PyTorch measured: numbers in both rows, records.jsonl has both, the
#     PNG chart exists; exit status 0 (spikemesh and one peer ran);
#   * bench/compare.py --all over those records: one block, spikemesh and the twin with ratios
#     (also on cuda, where spikemesh's fp32 precisions pair with the peers' --tf32 switch);
#   * spikemesh alone failing (a binary that exits 1): exit status non-zero;
#   * --isa avx2: the report names it, every record carries it, spikemesh's record says its own
#     kernels and oneDNN ran AVX2; an unknown --isa is refused.
# Prints "bench_report: N passed, M failed"; exits non-zero when anything failed. ~40 s.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
PY="${PY:-/usr/bin/python3}"

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
check() {  # check "description" command...
  local what="$1"; shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
finish() {
  echo "bench_report: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit $?
}
[ -x "$BIN" ] || { bad "$BIN built"; finish; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/bench_report.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
TINY=(--T 1 --batch-size 1 --steps 1 --warmup 0 --rounds 1 --threads 1 --no-multirank --spikemesh "$BIN")
row() { grep -F "| $1 |" "$2/report.md"; }   # row LABEL DIR
has_number() { echo "$1" | grep -Eq '\| [0-9]+\.[0-9]+ \('; }

# 1. no venv
BENCH_VENV="$TMP/no-venv" "$PY" "$ROOT/bench/report.py" "${TINY[@]}" --systems spikemesh,sj,torch_debian \
  --out "$TMP/a" > "$TMP/a.log" 2>&1
rc=$?
check "no venv: exit 0 (spikemesh and Debian PyTorch ran)" [ "$rc" -eq 0 ]
check "no venv: says how to create it" grep -q "make bench-deps" "$TMP/a.log"
sj_row=$(row "SpikingJelly, eager" "$TMP/a")
check "no venv: SpikingJelly row says not installed" grep -q "not installed" <<<"$sj_row"
check "no venv: SpikingJelly row has no number" bash -c "! grep -Eq '\| [0-9]+\.[0-9]+ \(' <<<'$sj_row'"
check "spikemesh row has samples/s" has_number "$(row spikemesh "$TMP/a")"
check "Debian PyTorch row has samples/s" has_number "$(row "PyTorch twin, Debian torch, eager" "$TMP/a")"
check "records.jsonl holds spikemesh and pytorch records" "$PY" -c "
import json, sys
recs = [json.loads(l) for l in open('$TMP/a/records.jsonl')]
sys.exit(0 if {r['system'] for r in recs} == {'spikemesh', 'torch_debian'} else 1)"
all_table=$("$PY" "$ROOT/bench/compare.py" --all "$TMP/a/records.jsonl" 2>&1)
check "compare.py --all: spikemesh and the twin in one block, with spikemesh's ratio" "$PY" -c "
import re, sys
t = sys.stdin.read()
sm = re.search(r'^   spikemesh +[0-9.]+ ', t, re.M)
tw = re.search(r'^   PyTorch twin, eager +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x', t, re.M)
sys.exit(0 if sm and tw and t.count('-- cifar10dvs_vgg') == 1 else 1)" <<<"$all_table"
# on a GPU the host thread count is no part of the configuration (spikemesh records OpenMP's,
# the peers torch's): the same records moved to cuda with different threads still pair
cuda_table=$("$PY" -c "
import json, sys
for l in open('$TMP/a/records.jsonl'):
    r = json.loads(l); r['device'] = 'cuda'; r['threads'] = 2 if r.get('backend') == 'spikemesh' else 16
    print(json.dumps(r))" > "$TMP/cuda.jsonl" && "$PY" "$ROOT/bench/compare.py" --all "$TMP/cuda.jsonl" 2>&1)
check "compare.py --all on cuda: different thread counts still pair" "$PY" -c "
import re, sys
t = sys.stdin.read()
sys.exit(0 if re.search(r'^   PyTorch twin, eager +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x', t, re.M) and t.count('-- cifar10dvs_vgg') == 1 else 1)" <<<"$cuda_table"
# fp32 on a GPU: each spikemesh run pairs with the peer of its convolution precision (strict
# IEEE with strict, TF32 with TF32), and the numerics column says which row is which
prec_table=$("$PY" -c "
import json
base = dict(model='cifar10dvs_vgg', T=10, batch_size=32, device='cuda', precision='fp32', mode='none',
            peak_allocated_mb=100.0, step_latency_ms=10.0)
for kw in [dict(backend='spikemesh', conv_algos='fast-tuned', conv_fp32_precision='ieee', matmul_fp32_precision='ieee', global_throughput_sps=500),
           dict(backend='spikemesh', conv_algos='fast-tuned', conv_fp32_precision='tf32', matmul_fp32_precision='ieee', global_throughput_sps=1000),
           dict(backend='spikingjelly', compile=False, tf32=False, global_throughput_sps=250),
           dict(backend='spikingjelly', compile=False, tf32=True, global_throughput_sps=2000)]:
    print(json.dumps(dict(base, **kw)))" > "$TMP/prec.jsonl" && "$PY" "$ROOT/bench/compare.py" --all "$TMP/prec.jsonl" 2>&1)
check "compare.py --all: strict pairs with strict, TF32 with TF32, numerics shown" "$PY" -c "
import re, sys
t = sys.stdin.read()
strict = re.search(r'^-- .*fp32 conv-fast-tuned\n.*\n   SpikingJelly, eager .* 2\.00x .*cudnn\.benchmark conv ieee mm ieee$', t, re.M)
tf32 = re.search(r'^-- .*fp32 conv-fast-tuned conv-tf32\n.*fast-tuned conv tf32 mm ieee\n   SpikingJelly, eager .* 0\.50x .*conv tf32 mm tf32$', t, re.M)
sys.exit(0 if strict and tf32 and t.count('-- cifar10dvs_vgg') == 2 else 1)" <<<"$prec_table"
check "report.png is a PNG" bash -c "head -c 8 '$TMP/a/report.png' | od -An -c | grep -q 'P   N   G'"

# 2. a venv whose peer cannot be imported
mkdir -p "$TMP/broken/bin"
cat > "$TMP/broken/bin/python" <<'PYEOF'
#!/bin/sh
echo "Traceback (most recent call last):" >&2
echo "ModuleNotFoundError: No module named 'spikingjelly'" >&2
exit 1
PYEOF
chmod +x "$TMP/broken/bin/python"
BENCH_VENV="$TMP/broken" "$PY" "$ROOT/bench/report.py" "${TINY[@]}" --rounds 2 --systems spikemesh,sj,sj_compile \
  --out "$TMP/b" > "$TMP/b.log" 2>&1
rc=$?
check "import error: exit 1 (no peer ran)" [ "$rc" -eq 1 ]
sj_row=$(row "SpikingJelly + torch.compile" "$TMP/b")
check "import error: row names the error" grep -q "ModuleNotFoundError: No module named 'spikingjelly'" <<<"$sj_row"
check "import error: tried once, not every round" [ "$(grep -c 'SpikingJelly, eager \.\.\.' "$TMP/b.log")" -eq 1 ]
check "import error: targets not evaluated" grep -q "Not evaluated" "$TMP/b/report.md"

# 3. spikemesh itself failing
BENCH_VENV="$TMP/no-venv" "$PY" "$ROOT/bench/report.py" "${TINY[@]}" --spikemesh /bin/false \
  --systems spikemesh,torch_debian --out "$TMP/c" > "$TMP/c.log" 2>&1
rc=$?
check "spikemesh failing: exit non-zero" [ "$rc" -ne 0 ]
check "spikemesh failing: its row says failed" grep -q "failed: exit 1" <<<"$(row spikemesh "$TMP/c")"

# 4. every system held to AVX2 (--isa avx2): the environment reaches spikemesh, whose record says
# which registers its own kernels and oneDNN used; the report and every record name the choice
BENCH_VENV="$TMP/no-venv" "$PY" "$ROOT/bench/report.py" "${TINY[@]}" --isa avx2 --systems spikemesh,torch_debian \
  --out "$TMP/d" > "$TMP/d.log" 2>&1
rc=$?
check "--isa avx2: exit 0" [ "$rc" -eq 0 ]
check "--isa avx2: the report names the instruction set and its variables" \
  grep -q "Instruction set: avx2 for every system (ONEDNN_MAX_CPU_ISA=AVX2, SPIKEMESH_CPU_AVX512=0" "$TMP/d/report.md"
check "--isa avx2: every record says avx2; spikemesh's own kernels and oneDNN ran AVX2" "$PY" -c "
import json, sys
recs = [json.loads(l) for l in open('$TMP/d/records.jsonl')]
sm = [r for r in recs if r['system'] == 'spikemesh']
ok = len(recs) == 2 and all(r['isa'] == 'avx2' for r in recs) and len(sm) == 1 \
     and sm[0]['cpu_kernels_isa'] == 'avx2' and sm[0]['onednn_isa'] == 'avx2'
sys.exit(0 if ok else 1)"
"$PY" "$ROOT/bench/report.py" "${TINY[@]}" --isa sse > "$TMP/e.log" 2>&1
rc=$?
check "--isa sse: exit non-zero" [ "$rc" -ne 0 ]
check "--isa sse: the message names the flag and the value" grep -q "argument --isa: invalid choice: 'sse'" "$TMP/e.log"
finish
