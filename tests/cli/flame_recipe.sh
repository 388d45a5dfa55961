#!/bin/sh
# tests/cli/flame_recipe.sh -- issue 38, item 7: the FLAME-MoE recipes of moe-trace(1)
# ("Parquet (no reader)"), run as the page writes them. The Parquet one stacks one file per
# layer (actives/iter_N/layer_NN.parquet) into [tokens, layers, K]; pyarrow is not packaged in
# Debian, so a stand-in pyarrow.parquet module reads each "layer file" as JSON (read_table(path,
# columns=[c]).column(0).to_pylist(): the column's rows). The torch one makes a tuple of the
# per-layer indices of FLAME-MoE's own capture, (scores, indices) pairs as its analysis reads
# them (scripts/empirical_analysis/modules/router_saturation_step2.py: torch.load, then
# indices[:, :topk]). Needs a python3 with NumPy (and torch for the second case), else 77.
. "$(dirname "$0")/lib.sh"

PY=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then
        PY=$p
        break
    fi
done
[ -n "$PY" ] || { echo "no python3 with NumPy"; exit 77; }
MAN=$top_srcdir/man/moe-trace.1
tab=$(printf '\t')

# recipe N: the Nth example of the "Parquet (no reader)" section as shell text (python3 as
# $PY), roff escapes undone.
recipe() {
    awk -v n="$1" '/^\.SS "Parquet \(no reader\)"/ { s = 1; next } s && /^\.SS/ { exit }
        s && /^\.EX/ { k++; ex = 1; next } s && /^\.EE/ { ex = 0; next }
        s && ex && k == n { print }' "$MAN" | sed 's/\\-/-/g; s/\\e/\\/g; /^moe-trace /d' |
        sed "s|^python3 |\"\$PY\" |"
}

begin "the Parquet recipe stacks the layer files into [tokens, layers, K]"
mkdir -p "$T/pq/pyarrow" "$T/actives/iter_7"
: >"$T/pq/pyarrow/__init__.py"
cat >"$T/pq/pyarrow/parquet.py" <<'PY'
import json
class _Col:
    def __init__(self, rows): self.rows = rows
    def to_pylist(self): return self.rows
class _Table:
    def __init__(self, rows): self.rows = rows
    def column(self, i): return _Col(self.rows)
def read_table(path, columns):
    return _Table(json.load(open(path))[columns[0]])
PY
# layer l's ids of token t: [(t + l) % 8, (t + 2 l + 1) % 8]; three layers, four tokens
for l in 0 1 2; do
    "$PY" -c 'import json, sys; l = int(sys.argv[1]); json.dump({"expert_ids": [[(t + l) % 8, (t + 2 * l + 1) % 8] for t in range(4)]}, open(sys.argv[2], "w"))' \
        "$l" "$T/actives/iter_7/layer_0$l.parquet"
done
recipe 1 | sed 's|/iter_N/|/iter_7/|' >"$T/recipe1.sh"
grep -q 'np.stack' "$T/recipe1.sh" || fail "recipe: $(cat "$T/recipe1.sh")"
(cd "$T" && PY=$PY PYTHONPATH=$T/pq sh ./recipe1.sh) >"$T/out" 2>"$T/err"
expect_eq "$?" 0 "recipe status ($(head -c 300 "$T/err"))"
run moe import --no-PG -O t -o "$T/pq.txt" "$T/ids.npy"
expect_eq "$rc" 0 "import status"
expect_no_stderr
grep '^@MT' "$T/pq.txt" | grep -q "layers:3${tab}experts:8${tab}topk:2" ||
    fail "header: $(grep '^@MT' "$T/pq.txt")"
grep -v '^@' "$T/pq.txt" | cut -f6- >"$T/pq.rec"
printf '0,1\t1,3\t2,5\n1,2\t2,4\t3,6\n2,3\t3,5\t4,7\n3,4\t4,6\t5,0\n' >"$T/pq.want"
same_file "$T/pq.want" "$T/pq.rec" "each token's ids, layer by layer"
end

begin "the torch recipe joins FLAME-MoE's per-layer (scores, indices) files"
if "$PY" -c 'import torch' 2>/dev/null; then
    mkdir -p "$T/fl"
    (cd "$T/fl" && "$PY" -c '
import os, torch
for l in range(3):
    os.makedirs("actives/STEP/%d" % l, exist_ok=True)
    ix = torch.tensor([[(t + l) % 8, (t + 2 * l + 1) % 8, (t + 3) % 8 + 8] for t in range(4)])
    torch.save((torch.rand(4, 3), ix), "actives/STEP/%d/SAMPLE.pt" % l)
') || fail "writing the capture files"
    run moe import -o "$T/x.moet" "$T/fl/actives/STEP/0/SAMPLE.pt"
    expect_eq "$rc" 1 "a (scores, indices) pair is refused"
    expect_err_line "item 1 of the tuple is a [4, 3] integer tensor, item 0 a [4, 3] float one"
    recipe 2 | sed 's|^  ids.pt 8 |  ids.pt 2 |' >"$T/recipe2.sh"  # K = 2 of the 3 columns
    grep -q 'ids.pt 2 ' "$T/recipe2.sh" || fail "recipe: $(cat "$T/recipe2.sh")"
    (cd "$T/fl" && PY=$PY sh ../recipe2.sh) >"$T/out" 2>"$T/err"
    expect_eq "$?" 0 "recipe status ($(head -c 300 "$T/err"))"
    run moe import --no-PG -O t -o "$T/fl.txt" "$T/fl/ids.pt"
    expect_eq "$rc" 0 "import status"
    grep -v '^@' "$T/fl.txt" | cut -f6- >"$T/fl.rec"
    same_file "$T/pq.want" "$T/fl.rec" "each token's top-2, layer by layer"
else
    skip_case "no torch for $PY"
fi
end

finish
