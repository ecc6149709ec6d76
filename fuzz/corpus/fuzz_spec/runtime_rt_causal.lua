-- runtime test fixture: standard causal attention on odd shapes (not in the registry)
return { name = "rt_causal", heads = 2, lq = 37, lk = 29, dk = 16, dv = 8,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "causal" }
