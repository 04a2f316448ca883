"""The kernel launch as a PyTorch custom operator, `torch.ops.sagetune.attention`.

Registered with torch.library when `sagetune` is imported with PyTorch available. As an
operator, a call is one opaque node to torch.compile (no graph break, `fullgraph=True` works,
and the compiled graph can be captured into CUDA graphs by `mode="reduce-overhead"`); its
fake (meta) implementation gives the output shapes without running anything.

The operator takes tensors in `layout` (their dims in its order): contiguous, or views with
strides of their own that the kernels read in place (a packed QKV projection, a KV cache; head
dims that are multiples of 8), or anything else, which it copies. `sagetune.attention` checks
the arguments and is the API.
Outside torch.compile it calls `launch` directly: the operator's dispatch costs host time that
a short call (decoding: about 20 us on the GPU) would show. `torch.ops.sagetune.attention_varlen`
(packed variable-length batches), `torch.ops.sagetune.attention_paged` (queries over a paged
KV cache) and `torch.ops.sagetune.attention_varlen_paged` (packed variable-length queries over a
paged KV cache) are the other calls' operators, with `launch_varlen`, `launch_paged` and
`launch_varlen_paged` behind them. The paged calls also take FP8 caches (torch.float8_e4m3fn,
vLLM's kv_cache_dtype "fp8_e4m3") with their FP32 k_scale / v_scale tensors.
"""

from typing import Optional

import torch

from . import _capi

DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
# FP8 pages' element type (sage_kv_dtype SAGE_KV_DTYPE_FP8_E4M3); None where torch lacks it.
FP8 = getattr(torch, "float8_e4m3fn", None)


def dims(q, k, layout):
    """(b, hq, hkv, nq, nkv, d) of q and k, read in `layout`."""
    if layout == "HND":
        b, hq, nq, d = q.shape
        hkv, nkv = k.shape[1], k.shape[2]
    else:
        b, nq, hq, d = q.shape
        nkv, hkv = k.shape[1], k.shape[2]
    return b, hq, hkv, nq, nkv, d


# (shape, options, device, stream) -> (sage_attention_desc, workspace bytes): a call's descriptor
# and its workspace size are built once per problem and stream (each a ctypes call or two, on
# every call's host path); the stream, because a green context's stream runs the call on its
# partition of the SMs, whose kernel and workspace may differ from the whole GPU's.
_DESCS = {}
_DESCS_MAX = 1024


def _workspace_bytes(key, query):
    """The workspace bytes of a call keyed by `key`: query() (a workspace-size call of the C API,
    which selects the kernel at the bucket's first call) once, then from _DESCS."""
    ws_bytes = _DESCS.get(key)
    if ws_bytes is None:
        ws_bytes = query()
        if len(_DESCS) >= _DESCS_MAX:
            _DESCS.clear()
        _DESCS[key] = ws_bytes
    return ws_bytes


def _current_stream(index):
    # The raw handle, without building a torch.cuda.Stream (as Triton's launcher does).
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def strides(t, layout):
    """(batch, head, seq) element strides of t read in `layout`, when the kernels can read it in
    place (sage_attention_strided): head dim contiguous, 16-byte aligned, every stride of a dim
    longer than 1 a positive multiple of 8 elements (an expanded dim, stride 0, is copied); else
    None. The head dim must be a multiple of 8."""
    s = t.stride()
    if s[3] != 1 or t.data_ptr() % 16:
        return None
    st = (s[0], s[1], s[2]) if layout == "HND" else (s[0], s[2], s[1])
    n = t.shape
    sizes = (n[0], n[1], n[2]) if layout == "HND" else (n[0], n[2], n[1])
    for x, size in zip(st, sizes):
        if size > 1 and (x % 8 or x <= 0):
            return None
    return st


def launch(q, k, v, is_causal, layout, sm_scale, return_lse, policy, window=0):
    """(o, lse): o contiguous in `layout` with q's shape; lse fp32 [B, Hq, Nq], or None without
    return_lse. sm_scale 0: 1/sqrt(D). window: a causal sliding window (0: none)."""
    # The kernels load 16-byte vectors. Tensors contiguous in `layout` take sage_attention; views
    # whose strides the kernels can read (head dims that are multiples of 8) take
    # sage_attention_strided; anything else (an odd storage offset or stride) gets a copy.
    qkv = [q, k, v]
    st = None
    if not all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in qkv):
        if q.shape[3] % 8 == 0:
            st = [strides(t, layout) for t in qkv]
            for i in range(3):
                if st[i] is None:
                    qkv[i] = qkv[i].clone(memory_format=torch.contiguous_format)
                    st[i] = strides(qkv[i], layout)
        else:
            qkv = [t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)
                   for t in qkv]
    q, k, v = qkv
    b, hq, hkv, nq, nkv, d = dims(q, k, layout)
    index = q.device.index
    # The runtime works on the calling thread's current CUDA context: make it the tensors' device.
    if torch.cuda.current_device() != index:
        with torch.cuda.device(index):
            return launch(q, k, v, is_causal, layout, sm_scale, return_lse, policy, window)
    stream = _current_stream(index)
    key = (b, hq, hkv, nq, nkv, d, layout, q.dtype, is_causal, sm_scale, policy, window, index, stream)
    entry = _DESCS.get(key)
    if entry is None:
        desc = _capi.make_desc(b, hq, hkv, nq, nkv, d, layout=layout, dtype=DTYPES[q.dtype], causal=is_causal,
                               sm_scale=sm_scale, policy=policy, window=window)
        entry = (desc, _capi.workspace_size(desc, stream))  # selects the kernel (the bucket's first call)
        if len(_DESCS) >= _DESCS_MAX:
            _DESCS.clear()
        _DESCS[key] = entry
    desc, ws_bytes = entry
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous in `layout`, whatever q's strides
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device) if return_lse else None
    # The workspace from the caching allocator, on this stream (none where the kernel needs none).
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device) if ws_bytes else None
    args = (lse.data_ptr() if return_lse else 0, ws.data_ptr() if ws_bytes else 0, ws_bytes, stream)
    if st is None:
        _capi.attention(desc, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), *args)
    else:
        _capi.attention_strided(desc, q.data_ptr(), st[0], k.data_ptr(), st[1], v.data_ptr(), st[2], o.data_ptr(), None,
                                *args)
    return o, lse


@torch.library.custom_op("sagetune::attention", mutates_args=(), device_types="cuda")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, layout: str, sm_scale: float,
              return_lse: bool, policy: str, window: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = launch(q, k, v, is_causal, layout, sm_scale, return_lse, policy, window)
    return o, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


@attention.register_fake
def _(q, k, v, is_causal, layout, sm_scale, return_lse, policy, window=0):
    b, hq, _, nq, _, _ = dims(q, k, layout)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = q.new_empty((b, hq, nq) if return_lse else (0,), dtype=torch.float32)
    return o, lse


def launch_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, is_causal, sm_scale, return_lse,
                  policy, window=0):
    """(o, lse) of a variable-length batch: q [total_q, Hq, D], k and v [total_kv, Hkv, D], the
    offsets int32 CUDA tensors of batch + 1 entries; o contiguous like q, lse fp32 [Hq, total_q]
    or None. Non-contiguous tensors are copied."""
    q, k, v = [t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)
               for t in (q, k, v)]
    cu_seqlens_q, cu_seqlens_kv = cu_seqlens_q.contiguous(), cu_seqlens_kv.contiguous()
    index = q.device.index
    if torch.cuda.current_device() != index:
        with torch.cuda.device(index):
            return launch_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, is_causal, sm_scale,
                                 return_lse, policy, window)
    tq, hq, d = q.shape
    tkv, hkv = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1
    if tq == 0:  # no query rows: nothing to compute (an empty tensor has no address to pass)
        return torch.empty(q.shape, dtype=q.dtype, device=q.device), (
            torch.empty((hq, 0), dtype=torch.float32, device=q.device) if return_lse else None)
    stream = _current_stream(index)
    # Every offset is clamped on the device; an empty tensor's address is never read.
    desc = _capi.make_desc(batch, hq, hkv, max(1, max_seqlen_q), max(1, max_seqlen_kv), d, layout="NHD",
                           dtype=DTYPES[q.dtype], causal=is_causal, sm_scale=sm_scale, policy=policy, window=window)
    vl = _capi.make_varlen(cu_seqlens_q.data_ptr(), cu_seqlens_kv.data_ptr(), tq, tkv)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, tq), dtype=torch.float32, device=q.device) if return_lse else None
    # The totals too: the quantized kernels' workspace holds the packed rows' tiles and statistics.
    key = ("varlen", batch, hq, hkv, max_seqlen_q, max_seqlen_kv, d, q.dtype, is_causal, policy, window, tq, tkv,
           index)
    ws_bytes = _workspace_bytes(key, lambda: _capi.workspace_size_varlen(desc, vl))
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device) if ws_bytes else None
    _capi.attention_varlen(desc, vl, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           lse.data_ptr() if return_lse else 0, ws.data_ptr() if ws_bytes else 0, ws_bytes, stream)
    return o, lse


@torch.library.custom_op("sagetune::attention_varlen", mutates_args=(), device_types="cuda")
def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_kv: torch.Tensor, max_seqlen_q: int, max_seqlen_kv: int, is_causal: bool,
                     sm_scale: float, return_lse: bool, policy: str, window: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = launch_varlen(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, is_causal, sm_scale,
                           return_lse, policy, window)
    return o, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


@attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, is_causal, sm_scale, return_lse, policy,
      window=0):
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = q.new_empty((q.shape[1], q.shape[0]) if return_lse else (0,), dtype=torch.float32)
    return o, lse


def cache_strides(t):
    """(page, head, slot) element strides of a cache [num_pages, page_size, Hkv, D] when the kernels
    can read it in place (sage_paged_kv's k_strides / v_strides): head dim contiguous, 16-byte
    aligned, every stride of a dim longer than 1 a positive multiple of 8 elements (FP8 caches,
    one byte an element: of 16, and below 2^31); else None."""
    s = t.stride()
    if s[3] != 1 or t.data_ptr() % 16:
        return None
    fp8 = t.dtype == FP8
    m = 16 if fp8 else 8  # elements in 16 bytes
    st = (s[0], s[2], s[1])
    sizes = (t.shape[0], t.shape[2], t.shape[1])
    for x, size in zip(st, sizes):
        if size > 1 and (x % m or x <= 0 or (fp8 and x >= 2**31)):
            return None
    return st


def _scale_tensor(name, s, hkv):
    """An FP8 cache's scale as the kernels read it: None (1), or a contiguous FP32 vector of 1 or
    hkv elements."""
    if s is None:
        return None
    s = s.reshape(-1)
    if s.dtype != torch.float32:
        s = s.float()
    if s.numel() not in (1, hkv):
        raise ValueError(f"{name} must hold 1 or Hkv = {hkv} scales, got {s.numel()}")
    return s.contiguous()


def page_scales(k_cache, k_scale, v_scale, hkv):
    """The paged calls' element type and scales: (kv_dtype, k_scale, v_scale, scale_per_head) for
    _capi.make_paged, the scales as tensors (None: 1; keep them alive through the launch).
    Caches of the queries' type take no scales. FP8 caches: scale_per_head 1 where a scale holds
    one a kv head (Hkv > 1), a single value of the other one then expanded to Hkv entries."""
    if k_cache.dtype != FP8:
        if k_scale is not None or v_scale is not None:
            raise ValueError("k_scale / v_scale are FP8 caches' (torch.float8_e4m3fn); these caches are "
                             f"{k_cache.dtype}")
        return _capi.KV_DTYPE_INPUT, None, None, 0
    ks, vs = _scale_tensor("k_scale", k_scale, hkv), _scale_tensor("v_scale", v_scale, hkv)
    per_head = hkv > 1 and any(s is not None and s.numel() == hkv for s in (ks, vs))
    if per_head:  # both per head (a missing scale reads as 1 either way)
        ks, vs = [s.expand(hkv).contiguous() if s is not None and s.numel() == 1 else s for s in (ks, vs)]
    return _capi.KV_DTYPE_FP8_E4M3, ks, vs, int(per_head)


def _paged_inputs(q, k_cache, v_cache, block_table, cache_seqlens):
    """The calls over a paged cache: q copied where not contiguous and 16-byte aligned, the caches
    read in place through their strides where they can be (else copied), the tables contiguous;
    returns (q, k_cache, v_cache, k_strides, v_strides, block_table, cache_seqlens)."""
    if not (q.is_contiguous() and q.data_ptr() % 16 == 0):
        q = q.clone(memory_format=torch.contiguous_format)
    ks, vs = cache_strides(k_cache), cache_strides(v_cache)
    if ks is None:
        k_cache = k_cache.clone(memory_format=torch.contiguous_format)
        ks = cache_strides(k_cache)
    if vs is None:
        v_cache = v_cache.clone(memory_format=torch.contiguous_format)
        vs = cache_strides(v_cache)
    return q, k_cache, v_cache, ks, vs, block_table.contiguous(), cache_seqlens.contiguous()


def launch_paged(q, k_cache, v_cache, block_table, cache_seqlens, max_seqlen_k, is_causal, layout, sm_scale,
                 return_lse, policy, window=0, k_scale=None, v_scale=None):
    """(o, lse) of dense queries over a paged KV cache: q [B, Hq, Nq, D] in `layout`, k_cache and
    v_cache [num_pages, page_size, Hkv, D] (read in place through their strides; a cache the
    kernels cannot read so, one whose head dim is not contiguous, say, is copied), block_table an
    int32 CUDA tensor [B, max_pages], cache_seqlens int32 [B], max_seqlen_k the upper bound of any
    sequence's keys (desc->seq_kv); o contiguous in `layout` with q's shape, lse fp32 [B, Hq, Nq]
    or None. window: a causal sliding window (0: none). A non-contiguous q is copied. FP8 caches
    (torch.float8_e4m3fn: K's value e4m3 * k_scale, V's e4m3 * v_scale): k_scale / v_scale FP32
    CUDA tensors of 1 or Hkv scales, None: 1 (page_scales)."""
    q, k_cache, v_cache, ks, vs, block_table, cache_seqlens = _paged_inputs(q, k_cache, v_cache, block_table,
                                                                          cache_seqlens)
    index = q.device.index
    if torch.cuda.current_device() != index:
        with torch.cuda.device(index):
            return launch_paged(q, k_cache, v_cache, block_table, cache_seqlens, max_seqlen_k, is_causal, layout,
                                sm_scale, return_lse, policy, window, k_scale, v_scale)
    b, hq, _, nq, _, d = dims(q, q, layout)
    num_pages, page_size, hkv = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    max_pages = block_table.shape[1]
    kv_dtype, k_scale, v_scale, per_head = page_scales(k_cache, k_scale, v_scale, hkv)
    if b == 0 or nq == 0:  # no query rows: nothing to compute (an empty tensor has no address to pass)
        return torch.empty(q.shape, dtype=q.dtype, device=q.device), (
            torch.empty((b, hq, nq), dtype=torch.float32, device=q.device) if return_lse else None)
    stream = _current_stream(index)
    # desc->seq_kv: the upper bound of any sequence's keys (each one's own count is read on the device).
    desc = _capi.make_desc(b, hq, hkv, nq, max_seqlen_k, d, layout=layout, dtype=DTYPES[q.dtype], causal=is_causal,
                           sm_scale=sm_scale, policy=policy, window=window)
    kv = _capi.make_paged(k_cache.data_ptr(), v_cache.data_ptr(), block_table.data_ptr(), cache_seqlens.data_ptr(),
                          page_size, max_pages, num_pages, ks, vs, kv_dtype=kv_dtype,
                          k_scale=k_scale.data_ptr() if k_scale is not None else 0,
                          v_scale=v_scale.data_ptr() if v_scale is not None else 0, scale_per_head=per_head)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, nq), dtype=torch.float32, device=q.device) if return_lse else None
    key = ("paged", b, hq, hkv, nq, max_seqlen_k, d, layout, q.dtype, k_cache.dtype, is_causal, policy, page_size,
           max_pages, num_pages, window, index)
    ws_bytes = _workspace_bytes(key, lambda: _capi.workspace_size_paged(desc, kv))
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device) if ws_bytes else None
    _capi.attention_paged(desc, kv, q.data_ptr(), o.data_ptr(), lse.data_ptr() if return_lse else 0,
                          ws.data_ptr() if ws_bytes else 0, ws_bytes, stream)
    return o, lse


@torch.library.custom_op("sagetune::attention_paged", mutates_args=(), device_types="cuda")
def attention_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                    cache_seqlens: torch.Tensor, max_seqlen_k: int, is_causal: bool, layout: str, sm_scale: float,
                    return_lse: bool, policy: str, window: int = 0, k_scale: Optional[torch.Tensor] = None,
                    v_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = launch_paged(q, k_cache, v_cache, block_table, cache_seqlens, max_seqlen_k, is_causal, layout, sm_scale,
                          return_lse, policy, window, k_scale, v_scale)
    return o, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


@attention_paged.register_fake
def _(q, k_cache, v_cache, block_table, cache_seqlens, max_seqlen_k, is_causal, layout, sm_scale, return_lse, policy,
      window=0, k_scale=None, v_scale=None):
    b, hq, _, nq, _, _ = dims(q, q, layout)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = q.new_empty((b, hq, nq) if return_lse else (0,), dtype=torch.float32)
    return o, lse


def launch_varlen_paged(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
                        is_causal, sm_scale, return_lse, policy, window=0, k_scale=None, v_scale=None):
    """(o, lse) of variable-length queries over a paged KV cache: q packed [total_q, Hq, D] (a
    non-contiguous q is copied), cu_seqlens_q an int32 CUDA tensor of batch + 1 offsets, k_cache
    and v_cache [num_pages, page_size, Hkv, D] (read in place through their strides, copied where
    the kernels cannot read them so, as launch_paged's), block_table int32 [batch, max_pages],
    cache_seqlens int32 [batch], max_seqlen_q the longest sequence's queries (desc->seq_q),
    max_seqlen_k the upper bound of any sequence's keys (desc->seq_kv); o contiguous like q, lse
    fp32 [Hq, total_q] or None. window: a causal sliding window (0: none). FP8 caches and their
    k_scale / v_scale as launch_paged's."""
    q, k_cache, v_cache, ks, vs, block_table, cache_seqlens = _paged_inputs(q, k_cache, v_cache, block_table,
                                                                          cache_seqlens)
    cu_seqlens_q = cu_seqlens_q.contiguous()
    index = q.device.index
    if torch.cuda.current_device() != index:
        with torch.cuda.device(index):
            return launch_varlen_paged(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                                       max_seqlen_k, is_causal, sm_scale, return_lse, policy, window, k_scale, v_scale)
    tq, hq, d = q.shape
    num_pages, page_size, hkv = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    batch, max_pages = block_table.shape[0], block_table.shape[1]
    kv_dtype, k_scale, v_scale, per_head = page_scales(k_cache, k_scale, v_scale, hkv)
    if tq == 0 or batch == 0:  # no query rows: nothing to compute (an empty tensor has no address to pass)
        return torch.empty(q.shape, dtype=q.dtype, device=q.device), (
            torch.empty((hq, tq), dtype=torch.float32, device=q.device) if return_lse else None)
    stream = _current_stream(index)
    # desc->seq_q: the longest sequence's queries; desc->seq_kv: the upper bound of any sequence's
    # keys (each one's own counts, cu_seqlens_q and cache_seqlens, are read on the device).
    desc = _capi.make_desc(batch, hq, hkv, max(1, max_seqlen_q), max_seqlen_k, d, layout="NHD", dtype=DTYPES[q.dtype],
                           causal=is_causal, sm_scale=sm_scale, policy=policy, window=window)
    kv = _capi.make_paged(k_cache.data_ptr(), v_cache.data_ptr(), block_table.data_ptr(), cache_seqlens.data_ptr(),
                          page_size, max_pages, num_pages, ks, vs, kv_dtype=kv_dtype,
                          k_scale=k_scale.data_ptr() if k_scale is not None else 0,
                          v_scale=v_scale.data_ptr() if v_scale is not None else 0, scale_per_head=per_head)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, tq), dtype=torch.float32, device=q.device) if return_lse else None
    key = ("varlen_paged", batch, hq, hkv, max_seqlen_q, max_seqlen_k, d, q.dtype, k_cache.dtype, is_causal, policy,
           page_size, max_pages, num_pages, tq, window, index)
    ws_bytes = _workspace_bytes(key, lambda: _capi.workspace_size_varlen_paged(desc, tq, kv))
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device) if ws_bytes else None
    _capi.attention_varlen_paged(desc, cu_seqlens_q.data_ptr(), tq, kv, q.data_ptr(), o.data_ptr(),
                                 lse.data_ptr() if return_lse else 0, ws.data_ptr() if ws_bytes else 0, ws_bytes,
                                 stream)
    return o, lse


@torch.library.custom_op("sagetune::attention_varlen_paged", mutates_args=(), device_types="cuda")
def attention_varlen_paged(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                           cache_seqlens: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int,
                           max_seqlen_k: int, is_causal: bool, sm_scale: float, return_lse: bool,
                           policy: str, window: int = 0, k_scale: Optional[torch.Tensor] = None,
                           v_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = launch_varlen_paged(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                                 max_seqlen_k, is_causal, sm_scale, return_lse, policy, window, k_scale, v_scale)
    return o, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


@attention_varlen_paged.register_fake
def _(q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, max_seqlen_k, is_causal, sm_scale,
      return_lse, policy, window=0, k_scale=None, v_scale=None):
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = q.new_empty((q.shape[1], q.shape[0]) if return_lse else (0,), dtype=torch.float32)
    return o, lse
