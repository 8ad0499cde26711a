#!/bin/sh
# Interleaved A/B of resident decode steps (bench/gpu -child resident) on
# the accelerator machine: each variant is NAME:BINARY[:VAR=VALUE,...]
# (a binary of .devcarry-benchgpu/, built on the development machine as
# device.sh says; the variables set for that variant's runs, e.g.
# QPACK_CUDA_SHARED_SLOT=0), and every round runs each variant once in
# turn on the same container, so drift of the machine falls on all alike.
#   VARIANTS="new:gpu old:gpu-old slot0:gpu:QPACK_CUDA_SHARED_SLOT=0" \
#   DIMS="35b 80b" VOCABS="32768" ROUNDS=3 TOKENS=256 sh bench/gpu/ab.sh
# writes $OUT/ab/children.txt: one line a run, "NAME-DIMS-VOCAB-ROUND" and
# the step's JSON result (tok_per_sec, the CUDA counters), and ab/*.err
# (each run's stderr), and prints each run's tag, tok/s and launches a
# token. Every run is under `timeout`.
set -u
B=${B:-.devcarry-benchgpu}
OUT=${OUT:-/tmp/bench-gpu-out}
DIR=${DIR:-${TMPDIR:-/tmp}}
VARIANTS=${VARIANTS:-"new:gpu old:gpu-old"}
DIMS=${DIMS:-35b}
VOCABS=${VOCABS:-32768}
ROUNDS=${ROUNDS:-3}
TOKENS=${TOKENS:-256}
CONTEXT=${CONTEXT:-16}
LAYERS=${LAYERS:-8}
log=$OUT/ab
mkdir -p "$log"
for v in $VARIANTS; do
	bin=$(echo "$v" | cut -d: -f2)
	[ -f "$B/$bin" ] || gunzip -k "$B/$bin.gz" || exit 2
done
first=$(echo "$VARIANTS" | cut -d' ' -f1 | cut -d: -f2)
status=0
for d in $DIMS; do
	for voc in $VOCABS; do
		m=$DIR/ab-$d-$voc
		timeout 300 "$B/$first" -child write -model "$m" -dims "$d" -layers "$LAYERS" -vocab "$voc" >"$log/write-$d-$voc.txt" 2>&1 || {
			echo "ab.sh: writing $m failed" >&2
			status=1
			continue
		}
		r=1
		while [ "$r" -le "$ROUNDS" ]; do
			for v in $VARIANTS; do
				name=$(echo "$v" | cut -d: -f1)
				bin=$(echo "$v" | cut -d: -f2)
				vars=$(echo "$v" | cut -s -d: -f3 | tr ',' ' ')
				tag=$name-$d-$voc-$r
				# shellcheck disable=SC2086 # vars is a list of VAR=VALUE words
				line=$(env $vars timeout 120 "$B/$bin" -child resident -backend cuda -model "$m" -dims "$d" \
					-tokens "$TOKENS" -resident-context "$CONTEXT" 2>"$log/$tag.err") || status=1
				echo "$tag $line" >>"$log/children.txt"
			done
			r=$((r + 1))
		done
		rm -rf "$m"
	done
done
# One line a run: its tag, tok/s, launches a token and the hash of the
# tokens it drew (runs of one model whose logits keep their bits draw the
# same tokens: a differing hash is a switch that changed them).
field() { echo "$2" | sed -n "s/.*\"$1\":\"*\([0-9a-f.]*\).*/\1/p"; }
while read -r tag json; do
	echo "$tag tps=$(field tok_per_sec "$json") launches=$(field launches_per_token "$json") tokens=$(field tokens_hash "$json")"
done <"$log/children.txt"
exit $status
