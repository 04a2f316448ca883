"""sagetune: SageAttention-style quantized attention from the sage-tune runtime, for PyTorch.

    import sagetune
    o = sagetune.attention(q, k, v, is_causal=True)          # q, k, v: CUDA fp16/bf16 tensors
    o, lse = sagetune.attention(q, k, v, return_lse=True)
    o = sagetune.sdpa(q, k, v, is_causal=True)                # F.scaled_dot_product_attention's signature
    o = sagetune.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)  # packed sequences
    o = sagetune.attention_paged(q, k_cache, v_cache, block_table, cache_seqlens)  # over a paged KV cache
    o = sagetune.attention_paged(q, k8, v8, block_table, cache_seqlens, k_scale=ks, v_scale=vs)  # FP8 (e4m3) pages
    o = sagetune.attention_varlen_paged(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q,
                                        max_seqlen_q)  # packed sequences' queries over a paged KV cache

The kernels run on PyTorch's current CUDA stream of the tensors' device; the workspace comes
from PyTorch's caching allocator. The first call for a problem bucket selects the tuned kernel
(and may compile it: seconds); later calls only launch. Forward only: no autograd. The launch
is a PyTorch operator (torch.ops.sagetune.attention), so torch.compile takes a call whole.

The C library is found as described in sagetune/_capi.py ($SAGETUNE_LIB, next to the package,
the source tree's build folders, the system library path). See docs/python.md.
"""

import numbers

from ._capi import LIBRARY_PATH, SageError, make_desc, status_string  # noqa: F401
from . import _capi

try:  # the ctypes layer (and its tests) work without PyTorch
    import torch as _torch_module
except ImportError:
    _torch_module = None
if _torch_module is not None:
    from . import _op  # registers torch.ops.sagetune.attention

__all__ = ["attention", "attention_varlen", "attention_paged", "attention_varlen_paged", "sdpa", "variant",
           "variant_varlen", "SageError", "LIBRARY_PATH"]


def _torch():
    if _torch_module is None:
        raise ImportError("sagetune.attention needs PyTorch (import torch failed)")
    return _torch_module


def _physical_layout(tensors, layout):
    """The layout in which all tensors are contiguous as they are: `layout` itself, or the other
    one when all are transposed views (q.transpose(1, 2) of a contiguous NHD tensor is HND with
    NHD memory, which the kernels read directly); None when neither holds for all of them."""
    if all(t.is_contiguous() for t in tensors):
        return layout
    if all(t.transpose(1, 2).is_contiguous() for t in tensors):
        return "NHD" if layout == "HND" else "HND"
    return None


def _check_tensors(q, k, v, tensor_layout, fn="sagetune.attention", shape=None, names=("q", "k", "v"), fp8_kv=False):
    """q, k, v as the kernels take them: CUDA tensors of one supported dtype and device, k and v
    of one shape, no autograd; `shape` names the dims (default: the 4-D layout's), one string for
    all three or a tuple of three (each tensor's rank is its string's); `names` the arguments,
    for the messages. fp8_kv (the paged caches): k and v may also both be torch.float8_e4m3fn
    whatever q's dtype."""
    torch = _torch()
    shape = shape or ("[B, H, N, D]" if tensor_layout == "HND" else "[B, N, H, D]")
    shapes = shape if isinstance(shape, tuple) else (shape,) * 3
    for name, t, shp in zip(names, (q, k, v), shapes):
        ndim = shp.count(",") + 1
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{fn}: {name} is on {t.device}; the kernels need CUDA tensors")
        if t.dim() != ndim:
            raise ValueError(f"{fn}: {name} must be {ndim}-D ({shp}), got shape {tuple(t.shape)}")
        fp8 = fp8_kv and t is not q and t.dtype == _op.FP8
        if t.dtype not in _op.DTYPES and not fp8:
            raise TypeError(f"{fn}: {name} is {t.dtype}; supported: torch.float16, torch.bfloat16"
                            + (f" ({names[1]} and {names[2]} also torch.float8_e4m3fn)" if fp8_kv else ""))
    nq, nk, nv = names
    if not (q.dtype == k.dtype == v.dtype) and not (fp8_kv and k.dtype == v.dtype == _op.FP8):
        raise TypeError(f"{fn}: {nq}, {nk}, {nv} must share a dtype"
                        + (f" (or {nk} and {nv} both be torch.float8_e4m3fn)" if fp8_kv else "")
                        + f", got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{fn}: {nq}, {nk}, {nv} must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"{fn}: {nk} and {nv} must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(f"{fn} has no backward pass: call it under torch.no_grad() or "
                           "torch.inference_mode(), or use torch.nn.functional.scaled_dot_product_attention for training")


def _window(fn, window, is_causal):
    """The sliding window as an int, checked: >= 0, and only with a causal mask."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"{fn}: window must be an int >= 0 (0: no sliding window), got {window!r}")
    if window > 0 and not is_causal:
        raise ValueError(f"{fn}: window={window} is a sliding window over the most recent keys: it needs is_causal=True")
    return window


def attention(q, k, v, is_causal=False, tensor_layout="HND", sm_scale=None, return_lse=False, policy="balanced",
              window=0):
    """softmax(sm_scale * q k^T [causal]) v with the tuned quantized kernels.

    q: [B, Hq, Nq, D] ("HND") or [B, Nq, Hq, D] ("NHD"); k, v: the same with Hkv, Nkv. fp16 or
    bf16 CUDA tensors; D up to 256 (other than 64, 128 and 256: the next one's kernels, reading
    the rows as zero-padded); Hq a multiple of Hkv (grouped-query attention). Causal
    masking is bottom-right aligned (query i sees keys j <= i + Nkv - Nq), so it needs Nq <= Nkv;
    for Nq == Nkv it is the usual mask. sm_scale None: 1/sqrt(D). policy: "balanced" (default),
    "accurate" (FP16 P.V only) or "fast". window (with is_causal): a sliding window, each query
    sees its `window` most recent keys, i + Nkv - Nq - window < j <= i + Nkv - Nq (Mistral's and
    Gemma's sliding_window; flash_attn's window_size=(window - 1, 0)); 0: none.

    Views are read in place where the kernels can: contiguous tensors, transposed views of the
    other layout, and (D a multiple of 8) views whose strides are multiples of 8 elements, such
    as q, k, v = qkv.unbind(2) of a packed [B, N, 3, H, D] projection or K and V slices of a KV
    cache; anything else is copied first.

    Returns o in q's layout and shape (and, with return_lse, the natural-log log-sum-exp of each
    query row, fp32 [B, Hq, Nq]). Raises TypeError/ValueError for tensors it cannot take and
    SageError (with the library's message) for what the runtime refuses.
    """
    torch = _torch()
    if tensor_layout not in ("HND", "NHD"):
        raise ValueError(f"sagetune.attention: tensor_layout must be 'HND' or 'NHD', got {tensor_layout!r}")
    if policy not in _capi.POLICIES:
        raise ValueError(f"sagetune.attention: policy must be one of {', '.join(_capi.POLICIES)}, got {policy!r}")
    _check_tensors(q, k, v, tensor_layout)
    if sm_scale is not None and not (sm_scale > 0):
        raise ValueError(f"sagetune.attention: sm_scale must be > 0 (None for 1/sqrt(head_dim)), got {sm_scale}")
    window = _window("sagetune.attention", window, is_causal)

    b, d = q.shape[0], q.shape[3]
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"sagetune.attention: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim "
                         f"({tensor_layout} layout)")

    # Read the tensors where they are when the memory order allows it: transposed views of the
    # other layout take that layout's kernels; other views go to the operator in the requested
    # layout, which reads them through their strides where it can (a packed QKV projection, a KV
    # cache) and copies the rest (_op.launch). The operator returns O contiguous in the layout it
    # read; O comes back as a view in the requested one.
    layout = _physical_layout((q, k, v), tensor_layout) or tensor_layout
    if layout != tensor_layout:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # Traced by torch.compile: the operator (one opaque node); run eagerly: the launch itself.
    call = torch.ops.sagetune.attention if torch.compiler.is_compiling() else _op.launch
    o, lse = call(q, k, v, bool(is_causal), layout, 0.0 if sm_scale is None else float(sm_scale), bool(return_lse),
                  policy, window)
    if layout != tensor_layout:
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=False, sm_scale=None,
                     return_lse=False, policy="balanced", window=0):
    """Attention over a batch of sequences of different lengths, packed one after another.

    q: [total_q, Hq, D], k and v: [total_k, Hkv, D] (fp16 or bf16 CUDA tensors); sequence b's
    queries are rows cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q, its keys and values rows
    cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and v. cu_seqlens_*: int32 CUDA tensors of
    batch + 1 nondecreasing offsets from 0 (as flash_attn_varlen_func takes them). max_seqlen_q
    and max_seqlen_k: the longest sequence's lengths (ints; rows of a longer sequence past them
    are not computed). D: 64, 128 (on sm_90a also 256) or a multiple of 8 below one of them.
    Causal masking is bottom-right aligned per sequence; rows that see no key (a sequence
    without keys, or causal rows before the first) get O = 0 and LSE -inf. window: a causal
    sliding window per sequence, as attention()'s.

    policy "accurate" runs the unquantized (FP16/BF16 MMA) kernels; "balanced" (the default) and
    "fast" run, on sm_90a past 512-1K keys, the quantized ones (INT8 Q.K^T, FP8 P.V, each sequence's
    own statistics), elsewhere the unquantized ones. Returns o [total_q, Hq, D] (and with
    return_lse the natural-log LSE, fp32 [Hq, total_q]).
    """
    torch = _torch()
    if policy not in _capi.POLICIES:
        raise ValueError(f"sagetune.attention_varlen: policy must be one of {', '.join(_capi.POLICIES)}, got {policy!r}")
    _check_tensors(q, k, v, "NHD", fn="sagetune.attention_varlen", shape="[total, heads, head_dim]")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"sagetune.attention_varlen: k and v must have q's head_dim, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    for name, c in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(c, torch.Tensor) or c.dtype != torch.int32 or c.dim() != 1 or c.device != q.device:
            raise TypeError(f"sagetune.attention_varlen: {name} must be a 1-D torch.int32 tensor on {q.device}")
    if cu_seqlens_q.shape[0] < 2 or cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError("sagetune.attention_varlen: cu_seqlens_q and cu_seqlens_k must both hold batch + 1 >= 2 offsets, "
                         f"got {cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}")
    if sm_scale is not None and not (sm_scale > 0):
        raise ValueError(f"sagetune.attention_varlen: sm_scale must be > 0 (None for 1/sqrt(head_dim)), got {sm_scale}")
    window = _window("sagetune.attention_varlen", window, is_causal)
    call = torch.ops.sagetune.attention_varlen if torch.compiler.is_compiling() else _op.launch_varlen
    o, lse = call(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), bool(is_causal),
                  0.0 if sm_scale is None else float(sm_scale), bool(return_lse), policy, window)
    return (o, lse) if return_lse else o


def _paged_keys_bound(fn, max_seqlen_k, max_pages, page_size, sm_scale):
    """The calls over a paged cache: max_seqlen_k checked against the table's capacity (None: the
    capacity), and sm_scale (None or > 0)."""
    capacity = min(max_pages * page_size, 2**31 - 1)
    if max_seqlen_k is None:
        max_seqlen_k = max(1, capacity)
    elif (isinstance(max_seqlen_k, bool) or not hasattr(type(max_seqlen_k), "__index__")
          or not 1 <= int(max_seqlen_k) <= capacity):
        raise ValueError(f"{fn}: max_seqlen_k must be an int in [1, max_pages * page_size = {capacity}] (None: "
                         f"{capacity}), got {max_seqlen_k!r}")
    if sm_scale is not None and not (sm_scale > 0):
        raise ValueError(f"{fn}: sm_scale must be > 0 (None for 1/sqrt(head_dim)), got {sm_scale}")
    return max_seqlen_k


def _page_scales(fn, q, k_cache, k_scale, v_scale):
    """FP8 caches' scales checked, as the operator takes them: (k_scale, v_scale), each None (1) or
    an FP32 tensor of 1 or Hkv scales on q's device (a Python number becomes a 1-element tensor
    there). Caches of q's dtype take no scales; FP8 caches need a head dim that is a multiple of 16."""
    torch = _torch()
    if k_cache.dtype != _op.FP8:
        if k_scale is not None or v_scale is not None:
            raise ValueError(f"{fn}: k_scale and v_scale are the scales of FP8 caches (torch.float8_e4m3fn); these "
                             f"caches are {k_cache.dtype}: pass no scales")
        return None, None
    d, hkv = k_cache.shape[3], k_cache.shape[2]
    if d % 16:
        raise ValueError(f"{fn}: FP8 caches (torch.float8_e4m3fn) need a head_dim that is a multiple of 16 (their rows "
                         f"are read as 16-byte chunks of 16 elements), got {d}")
    out = []
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None or isinstance(s, torch.Tensor):
            pass
        elif isinstance(s, numbers.Real) and not isinstance(s, bool):
            # a fill on the device (no host-to-device copy: capturable in a CUDA graph)
            s = torch.full((1,), float(s), dtype=torch.float32, device=q.device)
        else:
            raise TypeError(f"{fn}: {name} must be None, a float or a torch.float32 tensor, got {type(s).__name__}")
        if s is not None:
            if s.dtype != torch.float32 or s.device != q.device:
                raise TypeError(f"{fn}: {name} must be a torch.float32 tensor on {q.device}, got {s.dtype} on "
                                f"{s.device}")
            if s.numel() not in (1, hkv):
                raise ValueError(f"{fn}: {name} must hold one scale, or one a kv head (Hkv = {hkv}), got "
                                 f"{s.numel()} (shape {tuple(s.shape)})")
        out.append(s)
    return tuple(out)


def attention_paged(q, k_cache, v_cache, block_table, cache_seqlens, max_seqlen_k=None, is_causal=False,
                    sm_scale=None, return_lse=False, policy="balanced", tensor_layout="NHD", window=0, k_scale=None,
                    v_scale=None):
    """Attention of dense queries over a paged KV cache (decoding, speculative or chunked steps of a
    serving engine), as flash_attn_with_kvcache takes a block table.

    q: [B, Nq, Hq, D] ("NHD", the default) or [B, Hq, Nq, D] ("HND"): Nq queries a sequence (a
    non-contiguous q is copied). k_cache, v_cache: [num_pages, page_size, Hkv, D], one shape, of
    q's dtype (fp16 or bf16) or both torch.float8_e4m3fn (FP8 pages, below), on q's device; read
    in place through their strides (views such as kv_cache[:, 0] and kv_cache[:, 1] of one
    [num_pages, 2, page_size, Hkv, D] pool too) where the head dim is contiguous and every other
    stride a multiple of 8 elements (FP8: of 16); otherwise copied.
    page_size: a power of two (checked by the library). block_table: int32 CUDA tensor
    [B, max_pages]; sequence b's key i is slot i % page_size of page block_table[b, i // page_size]
    (an entry outside [0, num_pages) reads page 0). cache_seqlens: int32 CUDA tensor [B], each
    sequence's keys. max_seqlen_k: an upper bound of cache_seqlens (an int, which picks the kernel;
    longer sequences are cut to it); None: max_pages * page_size, with no device-to-host sync. D: a
    multiple of 8 up to 256 (above 128 only on GPUs whose decode kernel at 256 fits: sm_80, sm_90a,
    sm_100); Hq a multiple of Hkv.

    Causal masking is bottom-right aligned per sequence: query i of sequence b sees keys
    j <= i + cache_seqlens[b] - Nq (the queries are the last Nq positions); rows that see no key
    get O = 0 and LSE -inf. window (with is_causal): a sliding window, each query sees its `window`
    most recent keys (i + cache_seqlens[b] - Nq - window < j), as attention()'s; 0: none (the
    mma.sync kernels: their window entries). Every policy runs the unquantized (FP16/BF16 MMA)
    kernels. Returns o with q's shape and dtype (and, with return_lse, the natural-log LSE, fp32
    [B, Hq, Nq]).

    FP8 pages (vLLM's kv_cache_dtype "fp8_e4m3"): k_cache and v_cache torch.float8_e4m3fn (OCP
    e4m3, one byte an element), a key's value e4m3(byte) * k_scale and a value's e4m3(byte) *
    v_scale; q stays fp16 or bf16, and so does o. k_scale, v_scale: None (1.0), a Python float,
    or a torch.float32 tensor on q's device of 1 scale (every kv head) or Hkv (one a kv head):
    vLLM's layer._k_scale / layer._v_scale pass straight through. The kernels read the scales on
    the device (a CUDA graph's replays see new values). D must be a multiple of 16; the kernels
    are the mma.sync kernels' FP8 entries. Scales with caches of q's dtype are a ValueError.
    """
    torch = _torch()
    fn = "sagetune.attention_paged"
    if tensor_layout not in ("HND", "NHD"):
        raise ValueError(f"{fn}: tensor_layout must be 'HND' or 'NHD', got {tensor_layout!r}")
    if policy not in _capi.POLICIES:
        raise ValueError(f"{fn}: policy must be one of {', '.join(_capi.POLICIES)}, got {policy!r}")
    qshape = "[B, H, N, D]" if tensor_layout == "HND" else "[B, N, H, D]"
    cache_shape = "[num_pages, page_size, Hkv, D]"
    _check_tensors(q, k_cache, v_cache, tensor_layout, fn=fn, shape=(qshape, cache_shape, cache_shape),
                   names=("q", "k_cache", "v_cache"), fp8_kv=True)
    if k_cache.shape[3] != q.shape[3]:
        raise ValueError(f"{fn}: k_cache and v_cache must have q's head_dim, got q {tuple(q.shape)}, "
                         f"k_cache {tuple(k_cache.shape)}")
    k_scale, v_scale = _page_scales(fn, q, k_cache, k_scale, v_scale)
    for name, t, ndim, shape in (("block_table", block_table, 2, "[B, max_pages]"),
                                 ("cache_seqlens", cache_seqlens, 1, "[B]")):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != ndim or t.device != q.device:
            raise TypeError(f"{fn}: {name} must be a {ndim}-D torch.int32 tensor {shape} on {q.device}")
    b = q.shape[0]
    if block_table.shape[0] != b or cache_seqlens.shape[0] != b:
        raise ValueError(f"{fn}: block_table and cache_seqlens must have q's batch ({b}) rows, got "
                         f"{tuple(block_table.shape)} and {tuple(cache_seqlens.shape)}")
    max_pages, page_size = block_table.shape[1], k_cache.shape[1]
    if max_pages < 1:
        raise ValueError(f"{fn}: block_table must hold at least one page a sequence, got {tuple(block_table.shape)}")
    max_seqlen_k = _paged_keys_bound(fn, max_seqlen_k, max_pages, page_size, sm_scale)
    window = _window(fn, window, is_causal)
    call = torch.ops.sagetune.attention_paged if torch.compiler.is_compiling() else _op.launch_paged
    o, lse = call(q, k_cache, v_cache, block_table, cache_seqlens, int(max_seqlen_k), bool(is_causal), tensor_layout,
                  0.0 if sm_scale is None else float(sm_scale), bool(return_lse), policy, window, k_scale, v_scale)
    return (o, lse) if return_lse else o


def attention_varlen_paged(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                           max_seqlen_k=None, is_causal=False, sm_scale=None, return_lse=False, policy="balanced",
                           window=0, k_scale=None, v_scale=None):
    """Variable-length queries over a paged KV cache: a serving step's prefill chunks and decoding
    sequences in one call, as flash_attn_varlen_func takes them with a block table (vLLM's
    flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens_q=..., max_seqlen_q=...,
    seqused_k=cache_seqlens, max_seqlen_k=..., block_table=block_table)).

    q: [total_q, Hq, D], the sequences' queries packed one after another (a non-contiguous q is
    copied); sequence b's queries are rows cu_seqlens_q[b]:cu_seqlens_q[b + 1], cu_seqlens_q an
    int32 CUDA tensor of batch + 1 nondecreasing offsets from 0. k_cache, v_cache, block_table
    ([batch, max_pages]) and cache_seqlens ([batch], each sequence's keys) as attention_paged()
    takes them: [num_pages, page_size, Hkv, D] caches of q's dtype (fp16 or bf16) or both
    torch.float8_e4m3fn, on q's device, read in place through their strides where the kernels
    can, int32 CUDA tables. max_seqlen_q: the
    longest sequence's queries (an int; rows of a longer sequence past it are not computed).
    max_seqlen_k: an upper bound of cache_seqlens (an int, which picks the kernel; longer
    sequences are cut to it); None: max_pages * page_size, with no device-to-host sync. D and Hq
    as attention_paged()'s.

    Causal masking is bottom-right aligned per sequence: query i of a sequence of n queries and
    k keys sees keys j <= i + k - n (its queries are the last n positions of its keys); rows that
    see no key get O = 0 and LSE -inf, and an empty sequence is skipped. window (with is_causal): a
    sliding window per sequence, as attention_paged()'s. Every policy runs the unquantized
    (FP16/BF16 MMA) kernels. Returns o [total_q, Hq, D] (and, with
    return_lse, the natural-log LSE, fp32 [Hq, total_q]).

    FP8 pages (vLLM's kv_cache_dtype "fp8_e4m3"), k_scale and v_scale as attention_paged()'s:
    torch.float8_e4m3fn caches whose values are e4m3(byte) * k_scale (K) and * v_scale (V), the
    scales None (1.0), a Python float, or a torch.float32 tensor on q's device of 1 or Hkv
    scales (vLLM's layer._k_scale / layer._v_scale pass straight through); D a multiple of 16;
    the mma.sync kernels' FP8 entries.
    """
    torch = _torch()
    fn = "sagetune.attention_varlen_paged"
    if policy not in _capi.POLICIES:
        raise ValueError(f"{fn}: policy must be one of {', '.join(_capi.POLICIES)}, got {policy!r}")
    cache_shape = "[num_pages, page_size, Hkv, D]"
    _check_tensors(q, k_cache, v_cache, "NHD", fn=fn, shape=("[total_q, Hq, D]", cache_shape, cache_shape),
                   names=("q", "k_cache", "v_cache"), fp8_kv=True)
    if k_cache.shape[3] != q.shape[2]:
        raise ValueError(f"{fn}: k_cache and v_cache must have q's head_dim, got q {tuple(q.shape)}, "
                         f"k_cache {tuple(k_cache.shape)}")
    k_scale, v_scale = _page_scales(fn, q, k_cache, k_scale, v_scale)
    for name, t, ndim, shape in (("block_table", block_table, 2, "[batch, max_pages]"),
                                 ("cache_seqlens", cache_seqlens, 1, "[batch]"),
                                 ("cu_seqlens_q", cu_seqlens_q, 1, "[batch + 1]")):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != ndim or t.device != q.device:
            raise TypeError(f"{fn}: {name} must be a {ndim}-D torch.int32 tensor {shape} on {q.device}")
    b = block_table.shape[0]
    if b < 1 or cache_seqlens.shape[0] != b:
        raise ValueError(f"{fn}: block_table and cache_seqlens must have one row a sequence (batch >= 1), got "
                         f"{tuple(block_table.shape)} and {tuple(cache_seqlens.shape)}")
    if cu_seqlens_q.shape[0] != b + 1:
        raise ValueError(f"{fn}: cu_seqlens_q must hold batch + 1 = {b + 1} offsets (batch: block_table's rows), got "
                         f"{cu_seqlens_q.shape[0]}")
    max_pages, page_size = block_table.shape[1], k_cache.shape[1]
    if max_pages < 1:
        raise ValueError(f"{fn}: block_table must hold at least one page a sequence, got {tuple(block_table.shape)}")
    if (isinstance(max_seqlen_q, bool) or not hasattr(type(max_seqlen_q), "__index__")
            or not 0 <= int(max_seqlen_q) <= 2**31 - 1):
        raise ValueError(f"{fn}: max_seqlen_q must be an int >= 0 (the longest sequence's queries), got "
                         f"{max_seqlen_q!r}")
    max_seqlen_k = _paged_keys_bound(fn, max_seqlen_k, max_pages, page_size, sm_scale)
    window = _window(fn, window, is_causal)
    call = torch.ops.sagetune.attention_varlen_paged if torch.compiler.is_compiling() else _op.launch_varlen_paged
    o, lse = call(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, int(max_seqlen_q), int(max_seqlen_k),
                  bool(is_causal), 0.0 if sm_scale is None else float(sm_scale), bool(return_lse), policy, window,
                  k_scale, v_scale)
    return (o, lse) if return_lse else o


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature, for calls without a mask.

    [B, H, N, D] tensors (4-D only); no attn_mask, no dropout, no autograd. PyTorch's is_causal
    mask is top-left aligned, so causal calls need Nq == Nkv here (where both alignments agree).
    """
    if attn_mask is not None:
        raise NotImplementedError("sagetune.sdpa: attn_mask is not supported (use is_causal, or torch's SDPA)")
    if dropout_p:
        raise NotImplementedError("sagetune.sdpa: dropout is not supported (inference kernels)")
    if getattr(query, "dim", lambda: 4)() != 4:
        raise NotImplementedError(f"sagetune.sdpa: only 4-D [B, H, N, D] tensors, got shape {tuple(query.shape)}")
    if is_causal and query.shape[-2] != key.shape[-2]:
        raise NotImplementedError("sagetune.sdpa: is_causal with L != S: PyTorch aligns the mask top-left, these "
                                  "kernels bottom-right; call sagetune.attention for bottom-right causal masking")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"sagetune.sdpa: query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True")
    return attention(query, key, value, is_causal=is_causal, tensor_layout="HND", sm_scale=scale)


def variant(q, k, v, is_causal=False, tensor_layout="HND", policy="balanced", window=0):
    """Name of the kernel variant that attention() runs for these tensors on their device."""
    torch = _torch()
    _check_tensors(q, k, v, tensor_layout)
    window = _window("sagetune.variant", window, is_causal)
    b, hq, hkv, nq, nkv, d = _op.dims(q, k, tensor_layout)
    # The layout attention() would hand the kernels (it is part of the problem bucket).
    layout = _physical_layout((q, k, v), tensor_layout) or tensor_layout
    desc = make_desc(b, hq, hkv, nq, nkv, d, layout=layout, dtype=_op.DTYPES[q.dtype], causal=is_causal, policy=policy,
                     window=window)
    with torch.cuda.device(q.device):
        return _capi.variant_name(desc)


def variant_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=False, policy="balanced",
                   window=0):
    """Name of the kernel variant that attention_varlen() runs for these arguments on q's device (a
    tuned winner of the batch's bucket, or the default); the offsets are not read."""
    torch = _torch()
    fn = "sagetune.variant_varlen"
    if policy not in _capi.POLICIES:
        raise ValueError(f"{fn}: policy must be one of {', '.join(_capi.POLICIES)}, got {policy!r}")
    _check_tensors(q, k, v, "NHD", fn=fn, shape="[total, heads, head_dim]")
    if cu_seqlens_q.shape[0] < 2 or cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(f"{fn}: cu_seqlens_q and cu_seqlens_k must both hold batch + 1 >= 2 offsets, got "
                         f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}")
    window = _window(fn, window, is_causal)
    desc = make_desc(cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1], int(max_seqlen_q), int(max_seqlen_k), q.shape[2],
                     layout="NHD", dtype=_op.DTYPES[q.dtype], causal=is_causal, policy=policy, window=window)
    varlen = _capi.make_varlen(0, 0, q.shape[0], k.shape[0])
    with torch.cuda.device(q.device):
        return _capi.variant_name_varlen(desc, varlen)
