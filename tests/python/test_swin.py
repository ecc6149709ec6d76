"""Swin's windows on the halo form (issue 42 item 3): heed's kernels and
libheed's N-d reference against a float64 computation written here from
torchvision's ShiftedWindowAttention (torchvision/models/swin_transformer.py):
torch.roll by -shift, window partition, (q * head_dim^-0.5) k^T +
relative_position_bias_table[relative_position_index] + the attention mask
(-100 where the regions differ), softmax, @ v, window reverse, roll back.
With torch and torchvision present, that computation is also checked
against torchvision's own shifted_window_attention (skipped without them)."""

import unittest

import numpy as np

import heed


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def close(test, got, ref, atol=1e-5, rtol=1e-4):
    test.assertEqual(got.shape, ref.shape)
    err = np.abs(got.astype(np.float64) - ref)
    test.assertFalse((err > atol + rtol * np.abs(ref)).any(), "max |err| %g" % err.max())


def relative_position_index(window):
    """torchvision's define_relative_position_index: query - key, first dimension slowest."""
    w0, w1 = window
    coords = np.stack(np.meshgrid(np.arange(w0), np.arange(w1), indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :]            # [2, N, N]: query i minus key j
    rel = rel.transpose(1, 2, 0).copy()
    rel[:, :, 0] += w0 - 1
    rel[:, :, 1] += w1 - 1
    rel[:, :, 0] *= 2 * w1 - 1
    return rel.sum(-1)                                       # [N, N]


def swin_attention(q, k, v, table, size, window, shift, masked=-100.0):
    """float64. q, k, v [B][heads][H*W][d] (k, v may have fewer heads: grouped);
    table [heads][(2 w0 - 1)(2 w1 - 1)] (torchvision's relative_position_bias_table
    transposed); out [B][heads][H*W][d]."""
    B, nh, L, d = q.shape
    Hm, Wm = size
    w0, w1 = window
    rep = nh // k.shape[1]
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    shift = [0 if window[i] >= size[i] else shift[i] for i in range(2)]
    grid = [a.reshape(B, nh, Hm, Wm, -1) for a in (q, k, v)]
    if sum(shift) > 0:
        grid = [np.roll(a, (-shift[0], -shift[1]), axis=(2, 3)) for a in grid]

    def partition(a):
        n = a.shape[-1]
        a = a.reshape(B, nh, Hm // w0, w0, Wm // w1, w1, n).transpose(0, 1, 2, 4, 3, 5, 6)
        return a.reshape(B, nh, -1, w0 * w1, n)

    qw, kw, vw = (partition(a) for a in grid)
    attn = np.einsum("bhwid,bhwjd->bhwij", qw * d ** -0.5, kw)
    N = w0 * w1
    bias = table.astype(np.float64).T[relative_position_index(window).reshape(-1)].reshape(N, N, -1)
    attn = attn + bias.transpose(2, 0, 1)[None, :, None]
    if sum(shift) > 0:
        mask = np.zeros((Hm, Wm))
        h_slices = ((0, -w0), (-w0, -shift[0]), (-shift[0], None))
        w_slices = ((0, -w1), (-w1, -shift[1]), (-shift[1], None))
        count = 0
        for h in h_slices:
            for w in w_slices:
                mask[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        mw = mask.reshape(Hm // w0, w0, Wm // w1, w1).transpose(0, 2, 1, 3).reshape(-1, N)
        m = mw[:, None, :] - mw[:, :, None]
        attn = attn + np.where(m != 0, masked, 0.0)[None, None]
    attn = np.exp(attn - attn.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    x = np.einsum("bhwij,bhwjd->bhwid", attn, vw)
    dv = x.shape[-1]
    x = x.reshape(B, nh, Hm // w0, Wm // w1, w0, w1, dv).transpose(0, 1, 2, 4, 3, 5, 6).reshape(B, nh, Hm, Wm, dv)
    if sum(shift) > 0:
        x = np.roll(x, (shift[0], shift[1]), axis=(2, 3))
    return x.reshape(B, nh, L, dv)


CASES = [
    # Swin-T stage 1 shapes, smaller: 7x7 windows shifted by 3 on a 14x14 map
    {"map": [14, 14], "block": 7, "shift": [3, 3], "heads": 3, "dk": 32},
    {"map": [14, 14], "block": 7, "heads": 2, "dk": 16},                           # not shifted
    {"map": [14, 8], "block": [7, 4], "shift": [3, 2], "heads": 4, "heads_kv": 2, "dk": 8},   # non-square
]


class SwinWindows(unittest.TestCase):
    def test_kernel_and_reference_match_torchvisions_semantics(self):
        for i, c in enumerate(CASES):
            blocks = c["block"] if isinstance(c["block"], list) else [c["block"]] * 2
            clip = [b - 1 for b in blocks]
            spec = dict(c, form="halo", halo=0, fuse="none", score="scaled_dot",
                        bias={"kind": "relative_joint", "clip": clip}, name="py_swin%d" % i)
            kern = heed.compile(spec)
            L, H, hkv, d = c["map"][0] * c["map"][1], c["heads"], c.get("heads_kv", c["heads"]), c["dk"]
            q, k, v = rand((2, H, L, d), 1 + i), rand((2, hkv, L, d), 11 + i), rand((2, hkv, L, d), 21 + i)
            table = rand((H, (2 * blocks[0] - 1) * (2 * blocks[1] - 1)), 31 + i) * 2
            want = swin_attention(q, k, v, table, c["map"], blocks, c.get("shift", [0, 0]))
            close(self, kern(q, k, v, params={"bias": [table]}), want)
            ref = heed.nd_reference(spec, q, k, v, params={"bias": table})
            np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)

    def test_mask_is_minus_100_not_minus_infinity(self):
        """torchvision's mask adds -100: a masked key whose score is 150 above
        the others still dominates (a -inf mask would give it weight 0)."""
        spec = {"name": "py_swin_m", "form": "halo", "map": [4, 4], "block": 2, "halo": 0, "shift": [1, 1],
                "dk": 1, "score": "dot", "fuse": "none", "bias": {"kind": "relative_joint", "clip": [1, 1]}}
        kern = heed.compile(spec)
        q = np.ones((1, 1, 16, 1), np.float32)
        k = np.zeros((1, 1, 16, 1), np.float32)
        k[0, 0, 0, 0] = 150.0
        v = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 16, 1)
        table = np.zeros((1, 9), np.float32)
        want = swin_attention(q, k, v, table, [4, 4], [2, 2], [1, 1])
        hard = swin_attention(q, k, v, table, [4, 4], [2, 2], [1, 1], masked=-np.inf)
        # map (3, 3) shares the rolled map's last window with map (0, 0), in another region
        self.assertAlmostEqual(want[0, 0, 15, 0], 1.0, places=6)
        self.assertAlmostEqual(hard[0, 0, 15, 0], 16.0, places=6)   # its window: four regions, one token each
        close(self, kern(q, k, v, params={"bias": [table]}), want)

    def test_refused_with_the_field_and_allowed_values(self):
        base = {"name": "py_swin_bad", "form": "halo", "map": [14, 14], "block": 7, "dk": 4, "fuse": "none"}
        for extra, words in (({"shift": [3, 3], "halo": 1}, "halo = 0"),
                             ({"shift": [7, 3]}, "0..block-1"),
                             ({"bias": {"kind": "relative_jont", "clip": 6}}, "relative_joint")):
            with self.assertRaises(Exception) as cm:
                heed.compile(dict(base, **extra))
            self.assertIn(words, str(cm.exception))

    def test_torchvision_shifted_window_attention(self):
        try:
            import torch
            from torchvision.models import swin_transformer as sw
        except ImportError as e:
            self.skipTest("torch/torchvision absent (%s)" % e)
        if not hasattr(sw, "shifted_window_attention"):
            self.skipTest("this torchvision has no shifted_window_attention")
        B, Hm, Wm, nh, hd, w, s = 2, 14, 14, 3, 8, [7, 7], [3, 3]
        C = nh * hd
        x = rand((B, Hm, Wm, C), 3).astype(np.float64)
        table = rand((nh, 169), 4).astype(np.float64)
        N = 49
        idx = torch.from_numpy(relative_position_index(w).reshape(-1))
        bias = torch.from_numpy(table.T.copy())[idx].view(N, N, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        eye = torch.eye(C, dtype=torch.float64)
        got = sw.shifted_window_attention(torch.from_numpy(x), torch.cat([eye, eye, eye]), eye, bias, w, nh, s)
        # q = k = v = x, heads split: [B, heads, H*W, hd]
        t = x.reshape(B, Hm * Wm, nh, hd).transpose(0, 2, 1, 3)
        want = swin_attention(t, t, t, table, [Hm, Wm], w, s)
        got = got.numpy().reshape(B, Hm * Wm, nh, hd).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


if __name__ == "__main__":
    unittest.main()
