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
    python3 bench/compare.py --heads-kv 8 --seq-kv 8192 --seqs 2048   # GQA 4:1, 2K queries over 8K keys
    python3 bench/compare.py --models all             # the attention shapes of a few public models
    python3 bench/compare.py --models llama3-8b-decode,llama3-8b-decode-4k --graph   # as a server replays

With --graph every method's call is captured into a CUDA graph (torch.cuda.graph, after an
eager warm-up call) and the graph's replay is what is timed and checked, as serving frameworks
replay their decoding step. (do_bench times the GPU with calls queued back to back, so the
host's launch cost is hidden in both modes; a replay measures what the graph runs.)

With --models the shapes come from the MODELS table below (batch, heads, KV heads, query and key
lengths, head dim, mask), and --batch/--heads/--heads-kv/--head-dim/--seqs/--seq-kv/--causal
are ignored. Where K and V have fewer heads, SDPA is asked to group the query heads itself
(enable_gqa, PyTorch 2.5 and later), else K and V are repeated to the query heads outside the
timed call (the note column says which).

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


# name: (what, batch, heads, kv heads, query length, key length, head dim, causal). The lengths
# are the token counts these models attend over at the resolution or context named.
MODELS = {
    "llama3-8b-8k": ("Llama 3 8B prefill, 8K context", 1, 32, 8, 8192, 8192, 128, True),
    "llama3-8b-2.9k": ("Llama 3 8B prefill, a 2900-token prompt", 1, 32, 8, 2900, 2900, 128, True),
    "llama3-70b-2k": ("Llama 3 70B prefill, 4 x 2K prompts", 4, 64, 8, 2048, 2048, 128, True),
    # Few (sequence, query head) pairs: a prompt on one GPU of a tensor-parallel group, a small
    # model's 12 heads (the defaults by batch x query heads, 2026-11-28).
    "llama3-70b-tp8-16k": ("Llama 3 70B, one GPU of 8 (8 query heads over 1 KV head), a 16K prompt", 1, 8, 1, 16384,
                           16384, 128, True),
    "gpt2-1k": ("GPT-2 (12 heads of 64), a 1K prompt", 1, 12, 12, 1024, 1024, 64, True),
    "chunked-prefill": ("Llama 3 8B, a 2K chunk over 16K cached keys", 1, 32, 8, 2048, 16384, 128, True),
    "chunked-prefill-512": ("Llama 3 8B, a 512-token chunk over 16K cached keys", 1, 32, 8, 512, 16384, 128, True),
    "flux-1024": ("FLUX.1 at 1024x1024 (4096 image + 512 text tokens)", 1, 24, 24, 4608, 4608, 128, False),
    "sd3-1024": ("SD3 medium at 1024x1024, CFG batch (4096 + 154 tokens)", 2, 24, 24, 4250, 4250, 64, False),
    "cogvideox-5b": ("CogVideoX-5B, 49 frames 720x480, CFG batch (17550 + 226 tokens)", 2, 48, 48, 17776, 17776, 64,
                     False),
    "hunyuan-video": ("HunyuanVideo, 33 frames 544x960 (18360 + 256 tokens)", 1, 24, 24, 18616, 18616, 128, False),
    "wan2.1-14b": ("Wan2.1 14B, 81 frames 832x480 (32760 tokens)", 1, 40, 40, 32760, 32760, 128, False),
    # Head dims below 128 (run on the D=128 kernels, three quarters of the row up to 96 columns).
    "pixart-alpha-1024": ("PixArt-alpha at 1024x1024, CFG batch (4096 tokens, head dim 72)", 2, 16, 16, 4096, 4096, 72,
                          False),
    "pixart-alpha-768": ("PixArt-alpha at 768x768, CFG batch (2304 tokens, head dim 72)", 2, 16, 16, 2304, 2304, 72,
                         False),
    "dit-xl-512": ("DiT-XL/2 at 512x512, CFG batch of 8 (1024 tokens, head dim 72)", 8, 16, 16, 1024, 1024, 72, False),
    "sd15-512-mid": ("SD 1.5 at 512x512, a 32x32 UNet level, CFG batch (1024 tokens, head dim 80)", 2, 8, 8, 1024,
                     1024, 80, False),
    "sd15-384-top": ("SD 1.5 at 384x384, the 48x48 UNet level, CFG batch (2304 tokens, head dim 40)", 2, 8, 8, 2304,
                     2304, 40, False),
    "phi3-mini-4k": ("Phi-3 mini prefill, a 4K prompt (head dim 96)", 1, 32, 32, 4096, 4096, 96, True),
    # Decoding: one new token a sequence over its KV cache (one query sees every key: no mask).
    "llama3-8b-decode": ("Llama 3 8B decoding, one token over a 32K KV cache", 1, 32, 8, 1, 32768, 128, False),
    "llama3-8b-decode-4k": ("Llama 3 8B decoding, one token over a 4K KV cache", 1, 32, 8, 1, 4096, 128, False),
    "llama3-8b-decode-b16": ("Llama 3 8B decoding, 16 sequences of 8K", 16, 32, 8, 1, 8192, 128, False),
    "llama3-70b-decode": ("Llama 3 70B decoding (64 query heads), one token over 32K", 1, 64, 8, 1, 32768, 128, False),
    "spec-decode": ("Llama 3 8B, 8 draft tokens verified over 32K (causal)", 1, 32, 8, 8, 32768, 128, True),
    "phi3-mini-decode": ("Phi-3 mini decoding, one token over a 4K KV cache (head dim 96)", 1, 32, 32, 1, 4096, 96,
                         False),
    # A GQA group of 7 query heads a KV head (28 / 4): the decode schedule packs it into one tile.
    "qwen2.5-7b-decode": ("Qwen2.5 7B decoding (28 query heads over 4 KV heads), one token over 32K", 1, 28, 4, 1,
                          32768, 128, False),
    "qwen2.5-7b-decode-b32": ("Qwen2.5 7B decoding, 32 sequences of 4K", 32, 28, 4, 1, 4096, 128, False),
    # Speculative decoding with a 7:1 group: on the H100 the decode schedule, 4 heads of 4 draft
    # tokens a tile, two tiles a KV head (persistent_split elsewhere: the group at 16 rows a head).
    "qwen2.5-7b-spec": ("Qwen2.5 7B, 4 draft tokens verified over 32K (causal)", 1, 28, 4, 4, 32768, 128, True),
    "qwen2.5-7b-spec-4k": ("Qwen2.5 7B, 4 draft tokens verified over 4K (causal)", 1, 28, 4, 4, 4096, 128, True),
    # Llama 3.1 405B on 8 GPUs (tensor parallel): 16 query heads over one KV head a GPU (8 draft
    # tokens of one sequence: on the H100 persistent_split, the group over two tiles of 8 heads,
    # its keys over the whole GPU with the share merge since 2026-11-27 (ab); the decode schedule
    # in 2026-11-27 (aa)).
    "llama3-405b-tp8-spec": ("Llama 3.1 405B, one GPU of 8, 8 draft tokens verified over 32K (causal)", 1, 16, 1, 8,
                             32768, 128, True),
    "llama3-70b-tp8-spec": ("Llama 3 70B, one GPU of 8 (8 query heads over 1 KV head), 8 draft tokens over 32K (causal)",
                            1, 8, 1, 8, 32768, 128, True),
    "spec-decode-8k": ("Llama 3 8B, 8 draft tokens verified over 8K (causal)", 1, 32, 8, 8, 8192, 128, True),
    # Few (sequence, kv head) pairs with 16-128 queries over a long cache: persistent_split, its
    # keys cut over every CTA and the partials merged by all of them, a share each (2026-11-27 (ab)).
    "llama3-405b-tp8-spec16": ("Llama 3.1 405B, one GPU of 8, 16 draft tokens verified over 32K (causal)", 1, 16, 1,
                               16, 32768, 128, True),
    "llama3-70b-tp8-draft64": ("Llama 3 70B, one GPU of 8, 64 draft tokens verified over 32K (causal)", 1, 8, 1, 64,
                               32768, 128, True),
    "llama3-70b-tp8-chunk128": ("Llama 3 70B, one GPU of 8, a 128-token chunk over 128K cached keys (causal)", 1, 8,
                                1, 128, 131072, 128, True),
    "llama3-405b-tp8-decode": ("Llama 3.1 405B, one GPU of 8, 16 sequences of 8K decoding", 16, 16, 1, 1, 8192, 128,
                               False),
    # Multi-query attention with more query heads than the decode tile's 16 rows: the group over
    # several tiles (StarCoder: 3 of 16 heads; Falcon 7B: 5, the last of 7).
    "starcoder-decode": ("StarCoder 15B decoding (48 query heads over one KV head), one token over 8K", 1, 48, 1, 1,
                         8192, 128, False),
    "starcoder-spec": ("StarCoder 15B, 4 draft tokens verified over 8K (causal)", 1, 48, 1, 4, 8192, 128, True),
    "falcon-7b-decode": ("Falcon 7B decoding (71 query heads over one KV head, head dim 64), one token over 2K", 1,
                         71, 1, 1, 2048, 64, False),
}


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
    """FP32 attention of batch 0, [H, N_q, D], computed a block of query rows at a time. K and V
    may have fewer heads (query head h reads KV head h // (H / H_kv)); the causal mask is
    bottom-right aligned (row i sees keys j <= i + N_kv - N_q), as sagetune's."""
    q0, k0, v0 = q[0].float(), k[0].float(), v[0].float()
    heads, n, d = q0.shape
    heads_kv, n_kv = k0.shape[0], k0.shape[1]
    group = heads // heads_kv
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q0)
    for h in range(heads):
        kt = k0[h // group].transpose(0, 1)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            scores = torch.matmul(q0[h, s:e], kt) * scale
            if causal:
                i = torch.arange(s, e, device=q.device)[:, None]
                j = torch.arange(n_kv, device=q.device)[None, :]
                scores.masked_fill_(j > i + (n_kv - n), float("-inf"))
            out[h, s:e] = torch.matmul(torch.softmax(scores, dim=-1), v0[h // group])
    return out


def accuracy(o, ref):
    a, b = o[0].float().flatten(), ref.flatten()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
    rel_l1 = ((a - b).abs().sum() / b.abs().sum()).item()
    return cos, rel_l1


def sdpa_call(q, k, v, causal, gqa):
    """PyTorch SDPA on the same problem, with a causal mask bottom-right aligned where N_q != N_kv
    (is_causal alone is top-left aligned). Where K and V have fewer heads: `gqa` lets SDPA group
    the query heads itself (enable_gqa), else K and V are repeated to the query heads here."""
    group = q.shape[1] // k.shape[1]
    kw = {}
    if group > 1:
        if gqa:
            kw["enable_gqa"] = True
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    n, n_kv = q.shape[2], k.shape[2]
    if causal and n != n_kv:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(n, n_kv)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)


def graphed(fn):
    """fn captured into a CUDA graph after a warm-up call on a side stream (PyTorch's recipe):
    a function replaying it and returning the captured output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()

    def replay():
        g.replay()
        return out

    return replay


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=0, help="KV heads (grouped-query attention; default: --heads)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqs", default="1024,8192,32768", help="comma-separated query lengths (and key lengths)")
    ap.add_argument("--seq-kv", type=int, default=0, help="key length (default: each query length)")
    ap.add_argument("--causal", choices=["no", "yes", "both"], default="no")
    ap.add_argument("--models", default="", help="comma-separated names from MODELS, or 'all' (see --list-models)")
    ap.add_argument("--list-models", action="store_true", help="print the MODELS table and exit")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--graph", action="store_true", help="time each call replayed from a CUDA graph")
    ap.add_argument("--warmup", type=int, default=25, help="warm-up time (ms) per measurement")
    ap.add_argument("--rep", type=int, default=200, help="measured time (ms) per measurement")
    args = ap.parse_args()
    if args.list_models:
        for name, (what, b, h, hkv, n, nkv, d, causal) in MODELS.items():
            print(f"{name:<16} B={b} H={h} H_kv={hkv} N_q={n} N_kv={nkv} D={d} {'causal' if causal else 'full'}  {what}")
        return
    # (label, B, H, H_kv, N_q, N_kv, D, causal)
    cases = []
    if args.models:
        names = list(MODELS) if args.models == "all" else args.models.split(",")
        for name in names:
            if name not in MODELS:
                sys.exit(f"unknown model '{name}': one of {', '.join(MODELS)} or 'all'")
            cases.append((name,) + MODELS[name][1:])
    else:
        heads_kv = args.heads_kv or args.heads
        if heads_kv < 1 or args.heads % heads_kv:
            sys.exit(f"--heads-kv must divide --heads ({args.heads}), got {heads_kv}")
        for n in (int(x) for x in args.seqs.split(",")):
            n_kv = args.seq_kv or n
            for causal in {"no": [False], "yes": [True], "both": [False, True]}[args.causal]:
                if causal and n > n_kv:
                    sys.exit(f"causal needs the query length <= --seq-kv (bottom-right aligned mask), got {n} > {n_kv}")
                cases.append((str(n), args.batch, args.heads, heads_kv, n, n_kv, args.head_dim, causal))
    if not torch.cuda.is_available():
        sys.exit("compare.py needs a CUDA device")
    # FP32 reference without TF32 rounding.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  sagetune library {sagetune.LIBRARY_PATH}")
    print(f"{args.dtype}, HND layout; TOPS = 4*B*H*N_q*N_kv*D / time (halved for causal); accuracy vs FP32 on batch 0"
          + ("; every call replayed from a CUDA graph" if args.graph else "") + "\n")
    header = (f"{'case':<16} {'B':>2} {'H':>3} {'Hkv':>3} {'N_q':>6} {'N_kv':>6} {'D':>3} {'causal':>6}  "
              f"{'method':<11} {'ms':>9} {'TOPS':>6} {'cos':>9} {'rel-L1':>8}  note")
    print(header)
    print("-" * len(header))
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = None
    for label, B, H, Hkv, n, n_kv, D, causal in cases:
        if (B, H, Hkv, n, n_kv, D) != shape:  # consecutive cases on one shape (both masks) share the inputs
            shape = (B, H, Hkv, n, n_kv, D)
            q = k = v = None
            torch.cuda.empty_cache()
            q = torch.randn(B, H, n, D, device="cuda", dtype=dtype, generator=gen)
            k, v = (torch.randn(B, Hkv, n_kv, D, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
        flops = 4.0 * B * H * n * n_kv * D / (2 if causal else 1)
        ref = reference_batch0(q, k, v, causal)
        sdpa = {}  # built at their first use (inside the try below), shared by both backends
        methods = [
            ("sagetune", lambda: sagetune.attention(q, k, v, is_causal=causal), None),
            ("sdpa-flash", None, SDPBackend.FLASH_ATTENTION),
            ("sdpa-cudnn", None, SDPBackend.CUDNN_ATTENTION),
        ]
        row = f"{label:<16} {B:>2} {H:>3} {Hkv:>3} {n:>6} {n_kv:>6} {D:>3} {str(causal).lower():>6}  "
        for name, fn, backend in methods:
            note = ""
            ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
            try:
                with torch.no_grad(), ctx:
                    if fn is None:
                        # enable_gqa first; K and V repeated where this PyTorch or backend lacks it
                        gqa_ways = [True, False] if H > Hkv else [False]
                        for i, gqa in enumerate(gqa_ways):
                            if gqa not in sdpa:
                                sdpa[gqa] = sdpa_call(q, k, v, causal, gqa)
                            fn = sdpa[gqa]
                            try:
                                o = fn()
                                break
                            except Exception:
                                if i + 1 == len(gqa_ways):
                                    raise
                        if H > Hkv:
                            note = "enable_gqa" if gqa else "K, V repeated"
                    o = fn()  # first call: sagetune selects (and may compile) here, untimed
                    if args.graph:
                        fn = graphed(fn)
                        o = fn()
                    torch.cuda.synchronize()
                    ms = median_ms(fn, args.warmup, args.rep)
                cos, rel = accuracy(o, ref)
                del o
                if name == "sagetune":
                    note = sagetune.variant(q, k, v, is_causal=causal)
                print(f"{row}{name:<11} {ms:>9.3f} {flops / ms / 1e9:>6.0f} {cos:>9.6f} {rel:>8.5f}  {note}", flush=True)
            except Exception as e:  # a backend this PyTorch or GPU lacks: say so and go on
                msg = str(e).splitlines()[0][:100] if str(e) else ""
                print(f"{row}{name:<11} {'n/a':>9} {'':>6} {'':>9} {'':>8}  {type(e).__name__}: {msg}", flush=True)
        del ref, sdpa


if __name__ == "__main__":
    main()
