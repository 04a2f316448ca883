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


if __name__ == "__main__":
    unittest.main()
