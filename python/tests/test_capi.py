"""The ctypes layer of sagetune, without PyTorch or a GPU: the library loads, descriptors reach
the C API intact, and refused calls raise SageError with the status and the library's message.

Run: SAGETUNE_LIB=build/lib/libsage_runtime.so python3 -m unittest discover -s python/tests -p 'test_capi*.py'
(also collected by pytest). tests/runtime/test_python_capi.cpp runs it under ctest.
"""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from sagetune import _capi  # noqa: E402
from sagetune._capi import SageError  # noqa: E402

# Aligned addresses that are never dereferenced: each case is refused before any device work.
Q, K, V, O = 0x10000, 0x20000, 0x30000, 0x40000


def good(**over):
    args = dict(batch=2, heads_q=8, heads_kv=2, seq_q=128, seq_kv=256, head_dim=128)
    args.update(over)
    return _capi.make_desc(**args)


class CapiTest(unittest.TestCase):
    def refused(self, status, text, desc, q=Q, k=K, v=V, o=O, lse=0, ws=0, ws_bytes=0):
        with self.assertRaises(SageError) as cm:
            _capi.attention(desc, q, k, v, o, lse, ws, ws_bytes)
        self.assertEqual(cm.exception.status, status, str(cm.exception))
        self.assertIn(text, str(cm.exception))
        return cm.exception

    def test_library_path_is_reported(self):
        self.assertTrue(os.path.exists(_capi.LIBRARY_PATH), _capi.LIBRARY_PATH)

    def test_descriptor_fields_reach_the_library(self):
        d = _capi.make_desc(4, 32, 8, 1000, 2000, 64, layout="NHD", dtype="bf16", causal=True, sm_scale=0.25,
                            policy="fast")
        self.assertEqual((d.batch, d.heads_q, d.heads_kv, d.seq_q, d.seq_kv, d.head_dim), (4, 32, 8, 1000, 2000, 64))
        self.assertEqual((d.layout, d.dtype, d.causal, d.policy), (1, 1, 1, 2))
        self.assertAlmostEqual(d.sm_scale, 0.25)
        # Each field is checked by the library by name: a wrong struct layout would misreport them.
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->heads_q (6) must be a multiple of desc->heads_kv (4)",
                     good(heads_q=6, heads_kv=4))
        self.refused(_capi.ERR_UNSUPPORTED, "head_dim 512 is not supported", good(head_dim=512))
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->seq_kv must be >= 1, got 0", good(seq_kv=0))
        bad = good()
        bad.policy = 9
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->policy 9", bad)
        bad = good()
        bad.sm_scale = -1.0
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->sm_scale must be finite and >= 0", bad)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "causal attention needs seq_q <= seq_kv",
                     good(seq_q=300, seq_kv=200, causal=True))
        # The window, the struct's last field.
        self.assertEqual(_capi.ctypes.sizeof(_capi.AttentionDesc), 48)
        self.assertEqual(good().window, 0)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->window (77) is a sliding window", good(window=77))
        self.refused(_capi.ERR_INVALID_ARGUMENT, "desc->window must be >= 0 (0: no sliding window), got -2",
                     good(window=-2, causal=True))

    def test_pointers(self):
        self.refused(_capi.ERR_INVALID_ARGUMENT, "q is NULL", good(), q=0)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "o is NULL", good(), o=0)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "must be 16-byte aligned", good(), k=K + 8)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "lse (0x50002) must be 4-byte aligned", good(), lse=0x50002)
        self.refused(_capi.ERR_INVALID_ARGUMENT, "must be 256-byte aligned", good(), ws=0x60080, ws_bytes=1 << 20)

    def test_strides_reach_the_library_field_by_field(self):
        self.assertEqual(_capi.ctypes.sizeof(_capi.Strides), 24)
        packed = (256 * 3 * 8 * 128, 128, 3 * 8 * 128)

        def refused(text, qs=None, ks=None, vs=None, os=None, desc=None):
            with self.assertRaises(SageError) as cm:
                _capi.attention_strided(desc or good(), Q, qs, K, ks, V, vs, O, os)
            self.assertEqual(cm.exception.status, _capi.ERR_INVALID_ARGUMENT, str(cm.exception))
            self.assertIn(text, str(cm.exception))

        refused("q_strides->seq must be a positive multiple of 8 elements (16 bytes), got 3076",
                qs=(packed[0], packed[1], packed[2] + 4))
        refused("k_strides->head must be a positive multiple of 8 elements (16 bytes), got 12", ks=(1 << 20, 12, 1024))
        refused("v_strides->batch must be a positive multiple of 8 elements (16 bytes), got -8", vs=(-8, 128, 1024))
        refused("o_strides->seq", os=(1 << 20, 128, 1028))
        refused("strided tensors need head_dim a multiple of 8", qs=packed, desc=good(head_dim=100))
        with self.assertRaises(SageError) as cm:
            _capi.attention_strided(good(), 0, packed, K, None, V, None, O, None)
        self.assertIn("q is NULL", str(cm.exception))

    def test_names_are_checked_in_python(self):
        for kw in ({"layout": "BHND"}, {"dtype": "fp32"}, {"policy": "greedy"}):
            with self.assertRaises(ValueError):
                good(**kw)

    def test_status_strings(self):
        self.assertEqual(_capi.status_string(_capi.ERR_NOT_IN_BUILD), "not in this build")
        self.assertEqual(_capi.status_string(_capi.ERR_JIT_DISABLED), "JIT disabled and kernel not compiled")
        self.assertEqual(_capi.status_string(99), "unknown status")

    def test_error_message_belongs_to_the_calling_thread(self):
        errors = []

        def worker():
            try:
                _capi.attention(good(head_dim=512), Q, K, V, O)
            except SageError as e:
                errors.append(e)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.assertEqual(len(errors), 1)
        self.assertIn("head_dim 512", errors[0].message)
        e = self.refused(_capi.ERR_INVALID_ARGUMENT, "q is NULL", good(), q=0)
        self.assertNotIn("head_dim", e.message)

    def test_workspace_size_and_variant_validate_too(self):
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size(good(head_dim=300))
        self.assertEqual(cm.exception.status, _capi.ERR_UNSUPPORTED)
        with self.assertRaises(SageError) as cm:
            _capi.variant_name(good(batch=0))
        self.assertEqual(cm.exception.status, _capi.ERR_INVALID_ARGUMENT)

    def test_variant_names_of_varlen_and_paged_calls_validate_their_calls(self):
        nhd = good(layout="NHD")
        for desc, vl, text in ((good(), _capi.make_varlen(0, 0, 256, 512), "desc->layout must be SAGE_LAYOUT_NHD"),
                               (nhd, _capi.make_varlen(0, 0, -1, 512), "varlen->total_q and total_kv must be >= 0")):
            with self.assertRaises(SageError) as cm:
                _capi.variant_name_varlen(desc, vl)
            self.assertEqual(cm.exception.status, _capi.ERR_INVALID_ARGUMENT, str(cm.exception))
            self.assertIn(text, str(cm.exception))
        with self.assertRaises(SageError) as cm:
            _capi.variant_name_paged(good(), _capi.make_paged(0, 0, 0, 0, 12, 16, 40))
        self.assertEqual(cm.exception.status, _capi.ERR_INVALID_ARGUMENT, str(cm.exception))
        self.assertIn("page", str(cm.exception))
        # Valid calls (offsets, pages and tables are not read): named where there is a device, else
        # refused for the want of one.
        for name_of in (lambda: _capi.variant_name_varlen(nhd, _capi.make_varlen(0, 0, 256, 512)),
                        lambda: _capi.variant_name_paged(good(), _capi.make_paged(0, 0, 0, 0, 16, 16, 40))):
            try:
                self.assertTrue(name_of().startswith("attn_"))
            except SageError as e:
                self.assertEqual(e.status, _capi.ERR_NO_DEVICE, str(e))

    def test_varlen_fields_reach_the_library_field_by_field(self):
        self.assertEqual(_capi.ctypes.sizeof(_capi.Varlen), 24)
        nhd = good(layout="NHD")

        def refused(status, text, vl, desc=nhd, lse=0):
            with self.assertRaises(SageError) as cm:
                _capi.attention_varlen(desc, vl, Q, K, V, O, lse)
            self.assertEqual(cm.exception.status, status, str(cm.exception))
            self.assertIn(text, str(cm.exception))

        refused(_capi.ERR_INVALID_ARGUMENT, "varlen->total_q and total_kv must be >= 0, got -2 and 7",
                _capi.make_varlen(0x70000, 0x80000, -2, 7))
        refused(_capi.ERR_INVALID_ARGUMENT, "varlen->cu_seqlens_kv is NULL", _capi.make_varlen(0x70000, 0, 5, 7))
        refused(_capi.ERR_INVALID_ARGUMENT, "varlen->cu_seqlens_q (0x70001) must be 4-byte aligned",
                _capi.make_varlen(0x70001, 0x80000, 5, 7))
        refused(_capi.ERR_INVALID_ARGUMENT, "desc->layout must be SAGE_LAYOUT_NHD",
                _capi.make_varlen(0x70000, 0x80000, 5, 7), desc=good())
        refused(_capi.ERR_UNSUPPORTED, "would need padded copies", _capi.make_varlen(0x70000, 0x80000, 5, 7),
                desc=good(layout="NHD", head_dim=100))
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size_varlen(good(layout="NHD", head_dim=300), _capi.make_varlen(0x70000, 0x80000, 5, 7))
        self.assertEqual(cm.exception.status, _capi.ERR_UNSUPPORTED)

    def test_paged_fields_reach_the_library_field_by_field(self):
        # sage_paged_kv: two pointers, two sage_strides (3 x int64), two pointers, four ints (the
        # last kv_dtype), two pointers (the FP8 scales), an int padded to the pointers' 8 bytes:
        # 16 + 48 + 16 + 16 + 16 + 8 = 120 (offsetof / sizeof of the C struct, gcc x86-64 and aarch64).
        self.assertEqual(_capi.ctypes.sizeof(_capi.PagedKV), 120)
        offsets = {name: getattr(_capi.PagedKV, name).offset for name, _ in _capi.PagedKV._fields_}
        self.assertEqual(offsets, {"k_pages": 0, "v_pages": 8, "k_strides": 16, "v_strides": 40, "block_table": 64,
                                   "seqlens_kv": 72, "page_size": 80, "max_pages": 84, "num_pages": 88,
                                   "kv_dtype": 92, "k_scale": 96, "v_scale": 104, "scale_per_head": 112})
        types = {name: t for name, t in _capi.PagedKV._fields_}
        self.assertEqual([types[n] for n in ("kv_dtype", "k_scale", "v_scale", "scale_per_head")],
                         [_capi.ctypes.c_int, _capi.ctypes.c_void_p, _capi.ctypes.c_void_p, _capi.ctypes.c_int])
        table, lens = 0x90000, 0xA0000

        def paged(**over):
            # good()'s seq_kv is 256: 16 pages of 16 slots a sequence, 40 pages in the pool.
            args = dict(k_pages=K, v_pages=V, block_table=table, seqlens_kv=lens, page_size=16, max_pages=16,
                        num_pages=40, k_strides=None, v_strides=None)
            args.update(over)
            return _capi.make_paged(**args)

        def refused(status, text, kv, desc=None, q=Q, o=O, lse=0, ws=0, ws_bytes=0):
            with self.assertRaises(SageError) as cm:
                _capi.attention_paged(desc or good(), kv, q, o, lse, ws, ws_bytes)
            self.assertEqual(cm.exception.status, status, str(cm.exception))
            self.assertIn(text, str(cm.exception))

        kv = paged(k_strides=(1, 2, 3), v_strides=(4, 5, 6))
        self.assertEqual((kv.k_strides.batch, kv.k_strides.head, kv.k_strides.seq), (1, 2, 3))
        self.assertEqual((kv.v_strides.batch, kv.v_strides.head, kv.v_strides.seq), (4, 5, 6))
        self.assertEqual((paged().k_strides.batch, paged().v_strides.seq), (0, 0))  # None: contiguous pages
        # Existing callers: the queries' type, no scales.
        self.assertEqual((paged().kv_dtype, paged().k_scale, paged().v_scale, paged().scale_per_head),
                         (0, None, None, 0))
        invalid = _capi.ERR_INVALID_ARGUMENT
        # The problem's checks first (the descriptor's, then page size, pages, the table's rows)...
        refused(invalid, "desc->seq_kv must be >= 1, got 0", paged(page_size=12), desc=good(seq_kv=0))
        refused(invalid, "kv->page_size must be a power of two (up to 2^24), got 12",
                paged(page_size=12, block_table=0))
        refused(invalid, "kv->page_size must be a power of two", paged(page_size=0))
        refused(invalid, "kv->num_pages must be >= 1, got 0", paged(num_pages=0))
        refused(invalid, "kv->max_pages (15) pages of 16 slots cannot hold desc->seq_kv (256) keys",
                paged(max_pages=15))
        refused(invalid, "kv->max_pages (64) pages of 4 slots cannot hold desc->seq_kv (300) keys",
                paged(page_size=4, max_pages=64), desc=good(seq_kv=300))
        refused(invalid, "desc->window (64) is a sliding window over the most recent keys",
                paged(), desc=good(window=64))
        refused(_capi.ERR_UNSUPPORTED, "its head dim must be a multiple of 8", paged(), desc=good(head_dim=100))
        # ... then the caches' and tables' pointers, then the caches' strides ...
        refused(invalid, "kv->k_pages is NULL", paged(k_pages=0), q=0)
        refused(invalid, "kv->v_pages (0x30008) must be 16-byte aligned", paged(v_pages=V + 8))
        refused(invalid, "kv->block_table is NULL", paged(block_table=0))
        refused(invalid, "kv->block_table (0x90002) must be 4-byte aligned", paged(block_table=table + 2))
        refused(invalid, "kv->seqlens_kv is NULL", paged(seqlens_kv=0))
        refused(invalid, "kv->seqlens_kv (0xa0002) must be 4-byte aligned", paged(seqlens_kv=lens + 2))
        refused(invalid, "kv->k_strides.batch (pages) must be a positive multiple of 8 elements (16 bytes), got 12",
                paged(k_strides=(12, 128, 256)))
        refused(invalid, "kv->k_strides.head must be a positive multiple of 8 elements (16 bytes), got 12",
                paged(k_strides=(4096, 12, 256)))
        refused(invalid, "kv->v_strides.seq (slots) must be a positive multiple of 8 elements (16 bytes), got -256",
                paged(v_strides=(4096, 128, -256)))
        # ... and last the dense tensors' (q, o, lse, workspace).
        refused(invalid, "q is NULL", paged(), q=0)
        refused(invalid, "o (0x40008) must be 16-byte aligned", paged(), o=O + 8)
        refused(invalid, "lse (0x50002) must be 4-byte aligned", paged(), lse=0x50002)
        refused(invalid, "workspace (0x60080) must be 256-byte aligned", paged(), ws=0x60080, ws_bytes=1 << 20)
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size_paged(good(), paged(page_size=3))
        self.assertEqual(cm.exception.status, invalid)
        self.assertIn("kv->page_size must be a power of two (up to 2^24), got 3", str(cm.exception))
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size_paged(good(head_dim=300), paged())
        self.assertEqual(cm.exception.status, _capi.ERR_UNSUPPORTED)

    def test_fp8_page_fields_reach_the_library_field_by_field(self):
        """sage_paged_kv's FP8 fields (kv_dtype, k_scale, v_scale, scale_per_head): make_paged fills
        them, and the library reads each by name (its refusals name the field), all before any
        device work, through sage_attention_paged, sage_attention_varlen_paged and their
        workspace sizes."""
        table, lens, ks, vs = 0x90000, 0xA0000, 0xB0000, 0xC0000
        fp8 = _capi.KV_DTYPE_FP8_E4M3
        self.assertEqual((_capi.KV_DTYPE_INPUT, fp8), (0, 1))
        invalid = _capi.ERR_INVALID_ARGUMENT

        def paged(**over):
            args = dict(k_pages=K, v_pages=V, block_table=table, seqlens_kv=lens, page_size=16, max_pages=16,
                        num_pages=40, kv_dtype=fp8, k_scale=ks, v_scale=vs, scale_per_head=1)
            args.update(over)
            return _capi.make_paged(**args)

        kv = paged()
        self.assertEqual((kv.kv_dtype, kv.k_scale, kv.v_scale, kv.scale_per_head), (1, ks, vs, 1))
        self.assertEqual((kv.page_size, kv.max_pages, kv.num_pages), (16, 16, 40))  # the fields before them
        kv = paged(k_scale=0, v_scale=0, scale_per_head=0)
        self.assertEqual((kv.k_scale, kv.v_scale, kv.scale_per_head), (None, None, 0))  # 0: NULL (a scale of 1)

        def refused(status, text, kv, desc=None, q=Q):
            for call in ("paged", "varlen_paged"):
                with self.assertRaises(SageError) as cm:
                    if call == "paged":
                        _capi.attention_paged(desc or good(), kv, q, O)
                    else:
                        d = desc or good()
                        d.layout = _capi.LAYOUTS["NHD"]
                        _capi.attention_varlen_paged(d, 0x70000, 300, kv, q, O)
                self.assertEqual(cm.exception.status, status, f"{call}: {cm.exception}")
                self.assertIn(text, str(cm.exception), call)

        refused(invalid, "kv->kv_dtype must be SAGE_KV_DTYPE_INPUT (0) or SAGE_KV_DTYPE_FP8_E4M3 (1), got 2",
                paged(kv_dtype=2))
        # FP8 rows are 16-byte chunks of 16 elements: head dims of 8 (not 16) elements are refused.
        refused(_capi.ERR_UNSUPPORTED, "head_dim 72: FP8 pages' rows are read as 16-byte chunks", paged(),
                desc=good(head_dim=72))
        # Strides: multiples of 16 elements (bytes) for FP8 pages, of 8 for the queries' type.
        refused(invalid, "kv->k_strides.head must be a positive multiple of 16 elements (16 bytes of FP8), got 136",
                paged(k_strides=(1 << 16, 136, 1024)))
        refused(invalid, "q is NULL", paged(kv_dtype=0, k_strides=(1 << 16, 136, 1024)), q=0)
        refused(invalid, "kv->v_strides.batch (pages) must be below 2^31 bytes for FP8 pages, got 2147483648",
                paged(v_strides=(1 << 31, 128, 1024)))
        # The scales: scale_per_head 0 or 1, 4-byte aligned pointers (read only for FP8 pages).
        refused(invalid, "kv->scale_per_head must be 0 or 1, got 2", paged(scale_per_head=2))
        refused(invalid, "kv->k_scale (0xb0002) must be 4-byte aligned", paged(k_scale=ks + 2))
        refused(invalid, "kv->v_scale (0xc0001) must be 4-byte aligned", paged(v_scale=vs + 1))
        refused(invalid, "q is NULL", paged(kv_dtype=0, scale_per_head=2, k_scale=ks + 2), q=0)
        refused(invalid, "q is NULL", paged(), q=0)  # a well-formed FP8 kv gets as far as the dense tensors
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size_paged(good(head_dim=72), paged())
        self.assertEqual(cm.exception.status, _capi.ERR_UNSUPPORTED, str(cm.exception))
        self.assertIn("multiple of 16", str(cm.exception))
        with self.assertRaises(SageError) as cm:
            _capi.workspace_size_varlen_paged(good(layout="NHD"), 300, paged(kv_dtype=3))
        self.assertEqual(cm.exception.status, invalid, str(cm.exception))
        self.assertIn("kv->kv_dtype must be", str(cm.exception))

    def test_varlen_paged_arguments_reach_the_library(self):
        """sage_attention_varlen_paged / sage_workspace_size_varlen_paged: the descriptor, total_q,
        cu_seqlens_q and the PagedKV struct each reach the library in their own argument slots (each
        refusal names the one it checks); all are refused before any device work."""
        nhd = good(layout="NHD")
        cu, table, lens = 0x70000, 0x90000, 0xA0000
        invalid = _capi.ERR_INVALID_ARGUMENT

        def paged(**over):
            args = dict(k_pages=K, v_pages=V, block_table=table, seqlens_kv=lens, page_size=16, max_pages=16,
                        num_pages=40)
            args.update(over)
            return _capi.make_paged(**args)

        def refused(status, text, desc=nhd, cu_q=cu, total_q=300, kv=None, q=Q, o=O, lse=0, ws=0, ws_bytes=0):
            with self.assertRaises(SageError) as cm:
                _capi.attention_varlen_paged(desc, cu_q, total_q, kv or paged(), q, o, lse, ws, ws_bytes)
            self.assertEqual(cm.exception.status, status, str(cm.exception))
            self.assertIn(text, str(cm.exception))

        refused(invalid, "desc->layout must be SAGE_LAYOUT_NHD", desc=good())
        refused(invalid, "total_q must be >= 0, got -3", total_q=-3)
        refused(invalid, "kv->page_size must be a power of two (up to 2^24), got 12", kv=paged(page_size=12))
        refused(invalid, "kv->max_pages (15) pages of 16 slots cannot hold desc->seq_kv (256) keys",
                kv=paged(max_pages=15))
        # a window reaches the library: causal only (its words: the C side's)
        refused(invalid, "desc->window (64) is a sliding window over the most recent keys",
                desc=good(layout="NHD", window=64))
        refused(invalid, "cu_seqlens_q is NULL", cu_q=0)
        refused(invalid, "kv->block_table is NULL", kv=paged(block_table=0))
        refused(invalid, "kv->seqlens_kv (0xa0002) must be 4-byte aligned", kv=paged(seqlens_kv=lens + 2))
        refused(invalid, "q is NULL", q=0)
        refused(invalid, "o (0x40008) must be 16-byte aligned", o=O + 8)
        refused(invalid, "lse (0x50002) must be 4-byte aligned", lse=0x50002)
        refused(invalid, "cu_seqlens_q (0x70002) must be 4-byte aligned", cu_q=cu + 2)
        refused(invalid, "workspace (0x60080) must be 256-byte aligned", ws=0x60080, ws_bytes=1 << 20)

        def ws_refused(status, text, desc=nhd, total_q=300, kv=None):
            with self.assertRaises(SageError) as cm:
                _capi.workspace_size_varlen_paged(desc, total_q, kv or paged())
            self.assertEqual(cm.exception.status, status, str(cm.exception))
            self.assertIn(text, str(cm.exception))

        ws_refused(invalid, "total_q must be >= 0, got -1", total_q=-1)
        ws_refused(invalid, "desc->layout must be SAGE_LAYOUT_NHD", desc=good())
        ws_refused(invalid, "kv->page_size must be a power of two (up to 2^24), got 3", kv=paged(page_size=3))
        ws_refused(_capi.ERR_UNSUPPORTED, "head_dim 300", desc=good(layout="NHD", head_dim=300))


if __name__ == "__main__":
    unittest.main()
