#!/bin/sh
# bench/bench_gpu.sh -- `make bench-gpu`: the moe-run CUDA kernels against cuBLAS dense GEMM and
# cudaMemcpy bandwidth on this machine's GPU, for bf16, fp16 and fp32 (Mixtral-like shape:
# hidden 4096, ffn 14336, 8 experts, top-2). Exits 77 with bench_gpu's message without a GPU.
# usage: bench_gpu.sh PATH/TO/bench_gpu [extra bench_gpu options]
set -u
prog=${1:?usage: bench_gpu.sh PATH/TO/bench_gpu [options]}
shift
for dt in bf16 fp16 fp32; do
	iters=20
	[ "$dt" = fp32 ] && iters=5
	"$prog" --dtype "$dt" --iters "$iters" "$@"
	rc=$?
	[ "$rc" -eq 0 ] || exit "$rc"
	echo
done
