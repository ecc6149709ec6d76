"""torchvision's Swin-T with heed's window attention (issue 42, item 4):
swin_t() (random weights, seeded), its stage-1 blocks features[1][0] (7x7
windows) and features[1][1] (shifted by 3, 3), 3 heads, C = 96, on a 56x56
map, through heed.torch.ShiftedWindowAttention (one halo kernel a call:
the joint relative bias from the module's relative_position_bias_table,
shift for the shifted block; no roll, partition or mask tensor). Checked
against torchvision's own computation in float64: the attention output
(before proj), the module's and the whole block's outputs all within
1e-6 (measured: heed 4.6e-8 / 5.1e-8 on the attention, torch's own float32
4.3e-8 / 5.1e-8; the block 1.4e-7, as torch's). The bias tables are redrawn in [-2, 2] (torchvision's init,
std 0.02, would hide a wrong index in the rounding). Skipped without torch
and torchvision."""

import copy
import unittest

try:
    import torch
    from torchvision.models import swin_t
    from torchvision.models import swin_transformer as sw
    import heed.torch as ht
    MISSING = None
except ImportError as e:
    MISSING = "torch/torchvision absent (%s)" % e

ATTENTION_TOL = 1e-6      # the "bias exact": heed's attention output vs torch's float64
OUTPUT_TOL = 1e-6         # after proj, and the block's (norms, MLP, residuals), vs float64


@unittest.skipIf(MISSING, MISSING)
class SwinTStage1(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = swin_t().eval()
        with torch.no_grad():
            for blk in cls.model.features[1]:
                blk.attn.relative_position_bias_table.uniform_(-2, 2)
        cls.x = torch.rand(1, 56, 56, 96, generator=torch.Generator().manual_seed(1)) * 2 - 1

    def attention64(self, attn, x):
        """torchvision's shifted_window_attention in float64, without proj."""
        a = copy.deepcopy(attn).double()
        return sw.shifted_window_attention(x.double(), a.qkv.weight, torch.eye(x.shape[-1], dtype=torch.float64),
                                           a.get_relative_position_bias(), a.window_size, a.num_heads,
                                           shift_size=a.shift_size, qkv_bias=a.qkv.bias, proj_bias=None)

    def check_block(self, i, shift):
        block = self.model.features[1][i]
        attn = block.attn
        self.assertEqual((attn.window_size, attn.shift_size, attn.num_heads), ([7, 7], shift, 3))
        mine = ht.ShiftedWindowAttention(attn)
        spec = mine.spec((56, 56), 96)
        self.assertEqual(spec.get("shift", [0, 0]), shift)
        self.assertEqual(spec["bias"], {"kind": "relative_joint", "clip": [6, 6]})
        with torch.no_grad():
            # the attention output (no proj): heed's kernel against torch's float64
            bare = ht.ShiftedWindowAttention(attn)
            bare.proj = torch.nn.Identity()
            want = self.attention64(attn, self.x)
            err = (bare(self.x).double() - want).abs().max().item()
            own = (sw.shifted_window_attention(self.x, attn.qkv.weight, torch.eye(96), attn.get_relative_position_bias(),
                                               [7, 7], 3, shift, qkv_bias=attn.qkv.bias).double() - want).abs().max().item()
            self.assertLessEqual(err, ATTENTION_TOL, "block %d attention: heed %.3g from float64 (torch's float32 %.3g)"
                                 % (i, err, own))
            # the module (qkv, attention, proj) and the whole block (norms, MLP, residuals)
            got = mine(self.x)
            self.assertLessEqual((got.double() - copy.deepcopy(attn).double()(self.x.double())).abs().max().item(),
                                 OUTPUT_TOL)
            self.assertLessEqual((got - attn(self.x)).abs().max().item(), OUTPUT_TOL)
            swapped = copy.deepcopy(block)
            self.assertEqual(ht.replace_shifted_window_attention(swapped), 1)
            self.assertIsInstance(swapped.attn, ht.ShiftedWindowAttention)
            self.assertLessEqual((swapped(self.x).double() - copy.deepcopy(block).double()(self.x.double()))
                                 .abs().max().item(), OUTPUT_TOL)

    def test_block_0_windows(self):
        self.check_block(0, [0, 0])

    def test_block_1_shifted_windows(self):
        self.check_block(1, [3, 3])

    def test_refusals(self):
        with self.assertRaises(ValueError) as cm:
            ht.ShiftedWindowAttention(torch.nn.Linear(2, 2))
        self.assertIn("ShiftedWindowAttention", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
