-- The seed's fused attention over a tensor cut into patches: a 3 x 32 x 32
-- image, 8 x 8 patches (16 tokens), linear f_Q, f_K, f_V (1 x 1
-- convolutions to 16 channels), the 16 patches fused into one, folded back
-- to (16, 8, 8).
return {
  name = "nd_patches",
  form = "patches",
  channels = 3, map = { 32, 32 }, window = { 8, 8 }, stride = { 8, 8 },
  f_q = { kind = "linear", out = 16 }, f_k = { kind = "linear", out = 16 }, f_v = { kind = "linear", out = 16 },
  g_v = "fold",
  heads = 2,
  score = "scaled_dot", norm = "softmax", fuse = "mean",
}
