-- Causal fused mean, lq < lk.
return { name = "g_causal_mean", lq = 23, lk = 41, dk = 16, dv = 9, fuse = "mean", mask = "causal" }
