-- Fused max, causal (two_pass).
return { name = "g_fused_max", heads = 2, lq = 29, lk = 31, dk = 8, dv = 16, fuse = "max", mask = "causal" }
