-- A 3 x 13 x 11 image cut into 4 x 3 patches with stride ≠ window, linear
-- f_Q, f_K, f_V (their weights guarded), folded back.
return { name = "g_nd_patches", form = "patches", channels = 3, map = { 13, 11 }, window = { 4, 3 },
  stride = { 3, 4 }, f_q = { kind = "linear", out = 4 }, f_k = { kind = "linear", out = 4 },
  f_v = { kind = "linear", out = 6 }, g_v = "fold", heads = 2, fuse = "mean" }
