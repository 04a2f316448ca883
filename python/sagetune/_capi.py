"""ctypes bindings of the sage-tune runtime's C API (runtime/include/sage/sage.h).

This module needs only the standard library: it finds and loads libsage_runtime.so and wraps
its functions so that a failing status raises SageError with the library's message. The
PyTorch layer (sagetune/__init__.py) is built on it.

The library is looked up, in order, at:
  1. $SAGETUNE_LIB (a path to libsage_runtime.so),
  2. next to this package (sagetune/libsage_runtime.so, or sagetune/lib/),
  3. the build folders of the source tree this package sits in (<repo>/build*/lib/),
     the most recently built first,
  4. the system's library path (an installed package: <prefix>/lib).
"""

import ctypes
import ctypes.util
import glob
import os

# sage_status (sage.h)
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_NOT_IN_BUILD = 3
ERR_JIT_DISABLED = 4
ERR_COMPILE = 5
ERR_CUDA = 6
ERR_NO_DEVICE = 7
ERR_WORKSPACE = 8
ERR_DATABASE = 9
ERR_INTERNAL = 10

LAYOUTS = {"HND": 0, "NHD": 1}
DTYPES = {"fp16": 0, "bf16": 1}
POLICIES = {"balanced": 0, "accurate": 1, "fast": 2}
# sage_kv_dtype (sage.h): a paged cache's element type
KV_DTYPE_INPUT = 0
KV_DTYPE_FP8_E4M3 = 1
KV_DTYPES = {"input": KV_DTYPE_INPUT, "fp8_e4m3": KV_DTYPE_FP8_E4M3}


class SageError(RuntimeError):
    """A failed runtime call. `status` is the sage_status code, `status_name` its text."""

    def __init__(self, status, status_name, message):
        super().__init__(f"{status_name}: {message}" if message else status_name)
        self.status = status
        self.status_name = status_name
        self.message = message


class AttentionDesc(ctypes.Structure):
    """sage_attention_desc. C enums are ints on every platform this library builds for."""

    _fields_ = [
        ("batch", ctypes.c_int),
        ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int),
        ("seq_q", ctypes.c_int),
        ("seq_kv", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("causal", ctypes.c_int),
        ("sm_scale", ctypes.c_float),
        ("policy", ctypes.c_int),
        ("window", ctypes.c_int),
    ]


def _candidates():
    env = os.environ.get("SAGETUNE_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libsage_runtime.so")
    yield os.path.join(here, "lib", "libsage_runtime.so")
    repo = os.path.dirname(os.path.dirname(here))
    built = glob.glob(os.path.join(repo, "build*", "lib", "libsage_runtime.so"))
    for path in sorted(built, key=os.path.getmtime, reverse=True):
        yield path
    found = ctypes.util.find_library("sage_runtime")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "sagetune: cannot load libsage_runtime.so; build the sage-tune tree "
        "(cmake --build build) or set SAGETUNE_LIB=/path/to/libsage_runtime.so. Tried: "
        + ("; ".join(tried) if tried else "nothing")
    )


_lib, LIBRARY_PATH = _load()

_lib.sage_attention_desc_init.argtypes = [ctypes.c_int] * 6
_lib.sage_attention_desc_init.restype = AttentionDesc
_lib.sage_workspace_size.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(ctypes.c_size_t)]
_lib.sage_workspace_size.restype = ctypes.c_int
_lib.sage_workspace_size_on_stream.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_size_t)]
_lib.sage_workspace_size_on_stream.restype = ctypes.c_int
# The arguments after the descriptor that sage_attention and sage_attention_varlen share.
_CALL_ARGS = [
    ctypes.c_void_p,  # q
    ctypes.c_void_p,  # k
    ctypes.c_void_p,  # v
    ctypes.c_void_p,  # o
    ctypes.c_void_p,  # lse (float*)
    ctypes.c_void_p,  # workspace
    ctypes.c_size_t,  # workspace bytes
    ctypes.c_void_p,  # stream
]
_lib.sage_attention.argtypes = [ctypes.POINTER(AttentionDesc)] + _CALL_ARGS
_lib.sage_attention.restype = ctypes.c_int


class Strides(ctypes.Structure):
    """sage_strides: element strides of one tensor between batches, heads and sequence positions."""

    _fields_ = [("batch", ctypes.c_int64), ("head", ctypes.c_int64), ("seq", ctypes.c_int64)]


_StridesP = ctypes.POINTER(Strides)
_lib.sage_attention_strided.argtypes = [
    ctypes.POINTER(AttentionDesc),
    ctypes.c_void_p, _StridesP,  # q
    ctypes.c_void_p, _StridesP,  # k
    ctypes.c_void_p, _StridesP,  # v
    ctypes.c_void_p, _StridesP,  # o
    ctypes.c_void_p,  # lse (float*)
    ctypes.c_void_p,  # workspace
    ctypes.c_size_t,  # workspace bytes
    ctypes.c_void_p,  # stream
]
_lib.sage_attention_strided.restype = ctypes.c_int


class Varlen(ctypes.Structure):
    """sage_varlen: a variable-length batch's offsets (device int32 arrays) and packed totals."""

    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_kv", ctypes.c_void_p), ("total_q", ctypes.c_int),
                ("total_kv", ctypes.c_int)]


_lib.sage_workspace_size_varlen.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(Varlen),
                                            ctypes.POINTER(ctypes.c_size_t)]
_lib.sage_workspace_size_varlen.restype = ctypes.c_int
_lib.sage_attention_varlen.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(Varlen)] + _CALL_ARGS
_lib.sage_attention_varlen.restype = ctypes.c_int


class PagedKV(ctypes.Structure):
    """sage_paged_kv: a paged KV cache. K and V live in num_pages pages of page_size slots (a power
    of two); sequence b's key i is slot i % page_size of page block_table[b * max_pages + i / page_size].
    k_strides / v_strides: element strides between pages (batch), kv heads (head) and slots (seq);
    all zero means contiguous [num_pages, page_size, heads_kv, head_dim] pages.
    kv_dtype: the caches' element type (KV_DTYPES: 0 the queries' fp16/bf16, 1 FP8 e4m3, one byte
    an element, torch.float8_e4m3fn; FP8 pages need head_dim a multiple of 16 and strides that are
    positive multiples of 16). FP8 pages' values are e4m3(byte) * k_scale (K) and * v_scale (V):
    device FP32 arrays (NULL: 1), one scale for every kv head (scale_per_head 0: element 0) or
    one a kv head (scale_per_head 1: [heads_kv]). Zero-initialized: the queries' type, no scales."""

    _fields_ = [
        ("k_pages", ctypes.c_void_p),
        ("v_pages", ctypes.c_void_p),
        ("k_strides", Strides),
        ("v_strides", Strides),
        ("block_table", ctypes.c_void_p),  # const int32_t*: [batch, max_pages]
        ("seqlens_kv", ctypes.c_void_p),  # const int32_t*: [batch]
        ("page_size", ctypes.c_int),
        ("max_pages", ctypes.c_int),
        ("num_pages", ctypes.c_int),
        ("kv_dtype", ctypes.c_int),  # sage_kv_dtype
        ("k_scale", ctypes.c_void_p),  # const float*: 1 or [heads_kv], NULL: 1
        ("v_scale", ctypes.c_void_p),  # const float*: 1 or [heads_kv], NULL: 1
        ("scale_per_head", ctypes.c_int),
    ]


_lib.sage_workspace_size_paged.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(PagedKV),
                                           ctypes.POINTER(ctypes.c_size_t)]
_lib.sage_workspace_size_paged.restype = ctypes.c_int
_lib.sage_attention_paged.argtypes = [
    ctypes.POINTER(AttentionDesc),
    ctypes.POINTER(PagedKV),
    ctypes.c_void_p,  # q
    ctypes.c_void_p,  # o
    ctypes.c_void_p,  # lse (float*)
    ctypes.c_void_p,  # workspace
    ctypes.c_size_t,  # workspace bytes
    ctypes.c_void_p,  # stream
]
_lib.sage_attention_paged.restype = ctypes.c_int
_lib.sage_workspace_size_varlen_paged.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.c_int, ctypes.POINTER(PagedKV),
                                                  ctypes.POINTER(ctypes.c_size_t)]
_lib.sage_workspace_size_varlen_paged.restype = ctypes.c_int
_lib.sage_attention_varlen_paged.argtypes = [
    ctypes.POINTER(AttentionDesc),
    ctypes.c_void_p,  # cu_seqlens_q (const int32_t*: batch + 1 offsets)
    ctypes.c_int,  # total_q
    ctypes.POINTER(PagedKV),
    ctypes.c_void_p,  # q
    ctypes.c_void_p,  # o
    ctypes.c_void_p,  # lse (float*)
    ctypes.c_void_p,  # workspace
    ctypes.c_size_t,  # workspace bytes
    ctypes.c_void_p,  # stream
]
_lib.sage_attention_varlen_paged.restype = ctypes.c_int
_lib.sage_variant_name.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.c_char_p, ctypes.c_size_t]
_lib.sage_variant_name.restype = ctypes.c_int
_lib.sage_variant_name_varlen.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(Varlen), ctypes.c_char_p,
                                          ctypes.c_size_t]
_lib.sage_variant_name_varlen.restype = ctypes.c_int
_lib.sage_variant_name_paged.argtypes = [ctypes.POINTER(AttentionDesc), ctypes.POINTER(PagedKV), ctypes.c_char_p,
                                         ctypes.c_size_t]
_lib.sage_variant_name_paged.restype = ctypes.c_int
_lib.sage_last_error.argtypes = []
_lib.sage_last_error.restype = ctypes.c_char_p
_lib.sage_status_string.argtypes = [ctypes.c_int]
_lib.sage_status_string.restype = ctypes.c_char_p


def status_string(status):
    """The library's fixed text for a status code."""
    return _lib.sage_status_string(status).decode()


def _check(status):
    if status != OK:
        # The message is per thread in the library, and ctypes calls run on this thread.
        raise SageError(status, status_string(status), _lib.sage_last_error().decode(errors="replace"))


def make_desc(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, layout="HND", dtype="fp16", causal=False,
              sm_scale=0.0, policy="balanced", window=0):
    """A sage_attention_desc; raises ValueError for an unknown layout, dtype or policy name."""
    for name, table, value in (("layout", LAYOUTS, layout), ("dtype", DTYPES, dtype), ("policy", POLICIES, policy)):
        if value not in table:
            raise ValueError(f"unknown {name} {value!r} (expected one of {', '.join(table)})")
    d = _lib.sage_attention_desc_init(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim)
    d.layout = LAYOUTS[layout]
    d.dtype = DTYPES[dtype]
    d.causal = 1 if causal else 0
    d.sm_scale = float(sm_scale)
    d.policy = POLICIES[policy]
    d.window = int(window)
    return d


def workspace_size(desc, stream=None):
    """Bytes of workspace a call with `desc` needs (selects the kernel at the first call): on the
    current context's streams, or on `stream` (a raw handle, whose SMs may be a green context's
    partition: the kernel serving it, and its workspace, may differ from the whole GPU's)."""
    n = ctypes.c_size_t(0)
    if stream is None:
        _check(_lib.sage_workspace_size(ctypes.byref(desc), ctypes.byref(n)))
    else:
        _check(_lib.sage_workspace_size_on_stream(ctypes.byref(desc), stream or None, ctypes.byref(n)))
    return n.value


def variant_name(desc):
    """Name of the variant serving `desc` on the current device."""
    buf = ctypes.create_string_buffer(512)
    _check(_lib.sage_variant_name(ctypes.byref(desc), buf, len(buf)))
    return buf.value.decode()


def variant_name_varlen(desc, varlen):
    """Name of the variant serving the variable-length batch `desc`, `varlen` (its totals; the
    offsets are not read) on the current device."""
    buf = ctypes.create_string_buffer(512)
    _check(_lib.sage_variant_name_varlen(ctypes.byref(desc), ctypes.byref(varlen), buf, len(buf)))
    return buf.value.decode()


def variant_name_paged(desc, paged):
    """Name of the variant serving dense queries `desc` over the paged cache `paged` (its page size,
    page counts and kv_dtype; pages and tables are not read) on the current device."""
    buf = ctypes.create_string_buffer(512)
    _check(_lib.sage_variant_name_paged(ctypes.byref(desc), ctypes.byref(paged), buf, len(buf)))
    return buf.value.decode()


def attention(desc, q, k, v, o, lse=0, workspace=0, workspace_bytes=0, stream=0):
    """sage_attention() on raw device addresses (ints); raises SageError on failure."""
    _check(_lib.sage_attention(ctypes.byref(desc), q, k, v, o, lse or None, workspace or None, workspace_bytes,
                               stream or None))


def attention_strided(desc, q, q_strides, k, k_strides, v, v_strides, o, o_strides=None, lse=0, workspace=0,
                      workspace_bytes=0, stream=0):
    """sage_attention_strided() on raw device addresses (ints); each *_strides is an element-stride
    tuple (batch, head, seq) or None (contiguous in desc.layout). Raises SageError on failure."""
    def st(x):
        return ctypes.byref(Strides(*x)) if x is not None else None
    _check(_lib.sage_attention_strided(ctypes.byref(desc), q, st(q_strides), k, st(k_strides), v, st(v_strides), o,
                                       st(o_strides), lse or None, workspace or None, workspace_bytes, stream or None))


def make_varlen(cu_seqlens_q, cu_seqlens_kv, total_q, total_kv):
    """A sage_varlen over two device int32 arrays (raw addresses) of batch + 1 offsets."""
    return Varlen(cu_seqlens_q or None, cu_seqlens_kv or None, int(total_q), int(total_kv))


def workspace_size_varlen(desc, varlen):
    """Bytes of workspace sage_attention_varlen() needs (selects the kernel at the first call)."""
    n = ctypes.c_size_t(0)
    _check(_lib.sage_workspace_size_varlen(ctypes.byref(desc), ctypes.byref(varlen), ctypes.byref(n)))
    return n.value


def attention_varlen(desc, varlen, q, k, v, o, lse=0, workspace=0, workspace_bytes=0, stream=0):
    """sage_attention_varlen() on raw device addresses (ints); raises SageError on failure."""
    _check(_lib.sage_attention_varlen(ctypes.byref(desc), ctypes.byref(varlen), q, k, v, o, lse or None,
                                      workspace or None, workspace_bytes, stream or None))


def make_paged(k_pages, v_pages, block_table, seqlens_kv, page_size, max_pages, num_pages, k_strides=None,
               v_strides=None, kv_dtype=KV_DTYPE_INPUT, k_scale=0, v_scale=0, scale_per_head=0):
    """A sage_paged_kv over raw device addresses (ints): the caches' page 0, the int32 block table
    [batch, max_pages] and the int32 key counts [batch]. k_strides / v_strides: element-stride
    tuples (page, head, slot), or None for contiguous [num_pages, page_size, heads_kv, head_dim]
    pages. kv_dtype: KV_DTYPE_INPUT (0, the queries' type) or KV_DTYPE_FP8_E4M3 (1, e4m3 bytes);
    k_scale / v_scale: FP8 pages' device FP32 scales (addresses, 0: none, a scale of 1), one for
    every kv head (scale_per_head 0) or [heads_kv] (scale_per_head 1)."""
    def st(x):
        return Strides(*x) if x is not None else Strides(0, 0, 0)
    return PagedKV(k_pages or None, v_pages or None, st(k_strides), st(v_strides), block_table or None,
                   seqlens_kv or None, int(page_size), int(max_pages), int(num_pages), int(kv_dtype), k_scale or None,
                   v_scale or None, int(scale_per_head))


def workspace_size_paged(desc, paged):
    """Bytes of workspace sage_attention_paged() needs (selects the kernel at the first call)."""
    n = ctypes.c_size_t(0)
    _check(_lib.sage_workspace_size_paged(ctypes.byref(desc), ctypes.byref(paged), ctypes.byref(n)))
    return n.value


def attention_paged(desc, paged, q, o, lse=0, workspace=0, workspace_bytes=0, stream=0):
    """sage_attention_paged() on raw device addresses (ints); raises SageError on failure."""
    _check(_lib.sage_attention_paged(ctypes.byref(desc), ctypes.byref(paged), q, o, lse or None, workspace or None,
                                     workspace_bytes, stream or None))


def workspace_size_varlen_paged(desc, total_q, paged):
    """Bytes of workspace sage_attention_varlen_paged() needs for `total_q` packed query rows
    (selects the kernel at the first call)."""
    n = ctypes.c_size_t(0)
    _check(_lib.sage_workspace_size_varlen_paged(ctypes.byref(desc), int(total_q), ctypes.byref(paged),
                                                 ctypes.byref(n)))
    return n.value


def attention_varlen_paged(desc, cu_seqlens_q, total_q, paged, q, o, lse=0, workspace=0, workspace_bytes=0, stream=0):
    """sage_attention_varlen_paged() on raw device addresses (ints): packed queries q and o
    [total_q, heads_q, head_dim] (desc.layout NHD), cu_seqlens_q a device int32 array of batch + 1
    offsets, `paged` a PagedKV; raises SageError on failure."""
    _check(_lib.sage_attention_varlen_paged(ctypes.byref(desc), cu_seqlens_q or None, int(total_q), ctypes.byref(paged),
                                            q, o, lse or None, workspace or None, workspace_bytes, stream or None))
