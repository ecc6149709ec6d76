-- L = 7: shorter than any vector or tile; dk ≠ dv, two heads.
return { name = "g_std_l7", heads = 2, lq = 7, dk = 5, dv = 3, fuse = "none" }
