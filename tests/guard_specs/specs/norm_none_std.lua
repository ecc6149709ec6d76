return { name = "g_norm_none_std", lq = 17, lk = 130, dk = 9, dv = 10, score = "dot", norm = "none", fuse = "none" }
