-- Fused sum over a single query.
return { name = "g_fused_sum_l1", lq = 1, lk = 37, dk = 9, dv = 4, fuse = "sum" }
