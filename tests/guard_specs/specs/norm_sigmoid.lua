-- direct: an elementwise norm in the tile loop.
return { name = "g_norm_sigmoid", heads = 2, lq = 23, lk = 19, dk = 7, dv = 9, norm = "sigmoid", fuse = "none",
  mask = "causal" }
