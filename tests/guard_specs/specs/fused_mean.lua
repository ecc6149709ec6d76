-- The seed's fused mean (two_pass): store and recompute, every parallel axis.
return { name = "g_fused_mean", heads = 3, lq = 37, lk = 43, dk = 13, dv = 7, fuse = "mean" }
