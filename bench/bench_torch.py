#!/usr/bin/env python3
"""bench/bench_torch.py -- one MoE layer in PyTorch, in the style of Hugging Face's Mixtral
sparse-MoE block, against moeflow's layer on the same device (issue 21, item 7: moeflow at
least 2x faster).

The PyTorch layer: an RMS norm of the hidden states (the decoder layer's, before the block:
moeflow's SwiGLU experts normalise their input rows too), a linear router, softmax, top-k, the
k weights renormalised to sum to 1, then a loop over the experts that finds each expert's
tokens (torch.where on a one-hot mask), runs its SwiGLU FFN (w2(silu(w1 x) * w3 x)) and adds
the weighted rows back with index_add_ -- the way transformers' MixtralSparseMoeBlock
computes it, same shapes, same dtype, weights of nn.Linear layers.

moeflow's layer is bench_gpu's "MoE layer (gate..combine)" line: the computed gate, the
expert-sorted routing, the permute fused with the pack, the grouped SwiGLU FFN (one grouped
GEMM per product) and the deterministic combine, on one GPU. Give its output with --moeflow
(bench_gpu must have run with the same shapes and dtype: the header is checked); without it
only the PyTorch layer is timed.

usage: bench_torch.py [--moeflow FILE] [--tokens N] [--hidden H] [--ffn F] [--experts E]
                      [--topk K] [--dtype bf16|fp16|fp32] [--iters I] [--device cuda|cpu]
Exit status: 0 (the ratio is reported, met or not), 1 an error, 2 usage, 77 no PyTorch or no
device.
"""
import argparse
import re
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description="one MoE layer: PyTorch (Mixtral-style) vs moeflow")
    p.add_argument("--moeflow", metavar="FILE", help="bench_gpu's output (same shapes)")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if min(a.tokens, a.hidden, a.ffn, a.experts, a.topk, a.iters) < 1 or a.topk > a.experts:
        p.error("sizes and --iters must be >= 1, and --topk <= --experts")
    return a


def moeflow_layer_ms(path, a):
    """The layer's time from bench_gpu's output (bench_gpu.sh prints one block per dtype): the
    block whose header has our shapes and dtype."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        sys.exit("bench_torch.py: %s: %s" % (path, e.strerror))
    want = (a.dtype, a.tokens, a.topk, a.experts, a.hidden, a.ffn, "swiglu")
    seen = []
    for block in re.split(r"^(?=# bench_gpu:)", text, flags=re.M):
        head = re.search(r"^# dtype (\w+), tokens (\d+), topk (\d+), experts (\d+), "
                         r"hidden (\d+), ffn (\d+) \((\w+)\)", block, re.M)
        line = re.search(r"^MoE layer \(gate\.\.combine\)\s+([0-9.]+)", block, re.M)
        if not head or not line:
            continue
        got = (head.group(1),) + tuple(int(head.group(i)) for i in range(2, 7)) + (
            head.group(7),)
        if got == want:
            return float(line.group(1))
        seen.append(got)
    sys.exit("bench_torch.py: %s has no MoE layer line for dtype, tokens, topk, experts, "
             "hidden, ffn, expert %s (it has %s)" % (path, want, seen or "none"))


def main():
    a = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("bench_torch.py: no PyTorch in this Python; nothing to measure", file=sys.stderr)
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_torch.py: no CUDA device for PyTorch; nothing to measure", file=sys.stderr)
        return 77
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)

    class SparseMoeBlock(torch.nn.Module):
        """Router, top-k, and a loop over experts with index_add_ (see the file's comment)."""

        def __init__(self):
            super().__init__()

            def lin(i, o):
                return torch.nn.Linear(i, o, bias=False, device=dev, dtype=dt)

            self.norm = torch.nn.Parameter(torch.ones(a.hidden, device=dev, dtype=dt))
            self.router = lin(a.hidden, a.experts)
            self.w1 = torch.nn.ModuleList(lin(a.hidden, a.ffn) for _ in range(a.experts))
            self.w3 = torch.nn.ModuleList(lin(a.hidden, a.ffn) for _ in range(a.experts))
            self.w2 = torch.nn.ModuleList(lin(a.ffn, a.hidden) for _ in range(a.experts))

        def forward(self, x):
            var = x.float().pow(2).mean(-1, keepdim=True)
            h = (x.float() * torch.rsqrt(var + 1e-6)).to(dt) * self.norm
            probs = F.softmax(self.router(h), dim=1, dtype=torch.float)
            w, chosen = torch.topk(probs, a.topk, dim=-1)
            w = (w / w.sum(dim=-1, keepdim=True)).to(dt)
            out = torch.zeros_like(h)
            mask = F.one_hot(chosen, num_classes=a.experts).permute(2, 1, 0)
            for e in range(a.experts):
                k, tok = torch.where(mask[e])
                if tok.numel() == 0:
                    continue
                xe = h[tok]
                ye = self.w2[e](F.silu(self.w1[e](xe)) * self.w3[e](xe)) * w[tok, k, None]
                out.index_add_(0, tok, ye.to(dt))
            return out

    mf = moeflow_layer_ms(a.moeflow, a) if a.moeflow else None  # fail before the timing
    block = SparseMoeBlock()
    x = torch.randn(a.tokens, a.hidden, device=dev, dtype=dt)

    def timed():
        with torch.no_grad():
            for _ in range(3):
                block(x)
            if a.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(a.iters):
                    block(x)
                end.record()
                end.synchronize()
                return start.elapsed_time(end) / a.iters
            t0 = time.perf_counter()
            for _ in range(a.iters):
                block(x)
            return (time.perf_counter() - t0) * 1e3 / a.iters

    ms = timed()
    name = torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu"
    flops = 2.0 * 3 * a.tokens * a.topk * a.hidden * a.ffn
    print("# bench_torch.py: device %s, PyTorch %s" % (name, torch.__version__))
    print("# dtype %s, tokens %d, topk %d, experts %d, hidden %d, ffn %d (swiglu), iters %d"
          % (a.dtype, a.tokens, a.topk, a.experts, a.hidden, a.ffn, a.iters))
    print("%-36s %10s %12s" % ("# layer", "time_ms", "rate"))
    print("%-36s %10.3f %8.1f TF/s" % ("PyTorch Mixtral-style block", ms, flops / (ms * 1e9)))
    if mf is not None:
        ratio = ms / mf
        print("%-36s %10.3f %8.1f TF/s" % ("moeflow layer (bench_gpu)", mf, flops / (mf * 1e9)))
        print("moeflow is %.2fx faster than the PyTorch block (goal >= 2): %s"
              % (ratio, "met" if ratio >= 2 else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
