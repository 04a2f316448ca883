#!/usr/bin/env python3
"""sagetune next to PyTorch's fused attention, on the same inputs in one process.

For each sequence length (and causal setting) it times sagetune.attention and
torch.nn.functional.scaled_dot_product_attention restricted to the FlashAttention backend and
to the cuDNN backend, and measures each output against an FP32 reference computed on batch 0
(every head, all query rows, chunked so that N = 32K fits):

    TOPS   = 4 * B * H * N^2 * D / median time (halved for causal), preparation included
    cos    = cosine similarity with the reference, rel-L1 = sum|o - ref| / sum|ref|

    python3 bench/compare.py                          # B=4, H=32, D=128, N in {1K, 8K, 32K}
    python3 bench/compare.py --seqs 1024,4096 --causal both --dtype bf16

Needs PyTorch with CUDA; Triton's do_bench is used for timing when present (median, L2 flushed
between runs), CUDA events otherwise. The sagetune library is found as sagetune/_capi.py says
(e.g. a build in build-gpu/ of this tree, or SAGETUNE_LIB).
"""

import argparse
import contextlib
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sagetune  # noqa: E402

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402


def median_ms(fn, warmup, reps):
    """Median time of fn() in milliseconds."""
    try:
        from triton.testing import do_bench

        return do_bench(fn, warmup=warmup, rep=reps, return_mode="median")
    except ImportError:
        pass
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(max(10, reps // 10)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def reference_batch0(q, k, v, causal, chunk=2048):
    """FP32 attention of batch 0, [H, N, D], computed a block of query rows at a time."""
    q0, k0, v0 = q[0].float(), k[0].float(), v[0].float()
    heads, n, d = q0.shape
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q0)
    for h in range(heads):
        kt = k0[h].transpose(0, 1)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            scores = torch.matmul(q0[h, s:e], kt) * scale
            if causal:  # N_q == N_kv here: row i sees keys j <= i
                i = torch.arange(s, e, device=q.device)[:, None]
                j = torch.arange(n, device=q.device)[None, :]
                scores.masked_fill_(j > i, float("-inf"))
            out[h, s:e] = torch.matmul(torch.softmax(scores, dim=-1), v0[h])
    return out


def accuracy(o, ref):
    a, b = o[0].float().flatten(), ref.flatten()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
    rel_l1 = ((a - b).abs().sum() / b.abs().sum()).item()
    return cos, rel_l1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqs", default="1024,8192,32768", help="comma-separated sequence lengths (N_q = N_kv)")
    ap.add_argument("--causal", choices=["no", "yes", "both"], default="no")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--warmup", type=int, default=25, help="warm-up time (ms) per measurement")
    ap.add_argument("--rep", type=int, default=200, help="measured time (ms) per measurement")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("compare.py needs a CUDA device")
    # FP32 reference without TF32 rounding.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    B, H, D = args.batch, args.heads, args.head_dim
    seqs = [int(x) for x in args.seqs.split(",")]
    causals = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  sagetune library {sagetune.LIBRARY_PATH}")
    print(f"B={B} H={H} D={D} {args.dtype}, HND layout; TOPS = 4*B*H*N^2*D / time (halved for causal); "
          f"accuracy vs FP32 on batch 0\n")
    header = f"{'N':>6}  {'causal':>6}  {'method':<14} {'ms':>9} {'TOPS':>7} {'cos':>9} {'rel-L1':>8}  note"
    print(header)
    print("-" * len(header))
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n in seqs:
        q, k, v = (torch.randn(B, H, n, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
        for causal in causals:
            flops = 4.0 * B * H * n * n * D / (2 if causal else 1)
            ref = reference_batch0(q, k, v, causal)
            methods = [
                ("sagetune", lambda: sagetune.attention(q, k, v, is_causal=causal), None),
                ("sdpa-flash", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 SDPBackend.FLASH_ATTENTION),
                ("sdpa-cudnn", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 SDPBackend.CUDNN_ATTENTION),
            ]
            for name, fn, backend in methods:
                note = ""
                ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
                try:
                    with torch.no_grad(), ctx:
                        o = fn()  # first call: sagetune selects (and may compile) here, untimed
                        torch.cuda.synchronize()
                        ms = median_ms(fn, args.warmup, args.rep)
                    cos, rel = accuracy(o, ref)
                    del o
                    if name == "sagetune":
                        note = sagetune.variant(q, k, v, is_causal=causal)
                    print(f"{n:>6}  {str(causal).lower():>6}  {name:<14} {ms:>9.3f} {flops / ms / 1e9:>7.0f} "
                          f"{cos:>9.6f} {rel:>8.5f}  {note}", flush=True)
                except Exception as e:  # a backend this PyTorch or GPU lacks: say so and go on
                    print(f"{n:>6}  {str(causal).lower():>6}  {name:<14} {'n/a':>9} {'':>7} {'':>9} {'':>8}  "
                          f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}", flush=True)
            del ref
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
