-- Causal, lq > lk: the first rows have no key.
return { name = "g_causal", heads = 2, lq = 37, lk = 23, dk = 7, dv = 12, fuse = "none", mask = "causal" }
