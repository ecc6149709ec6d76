-- linear: norm none, fuse mean, no mask, dot-family score.
return { name = "g_norm_none_linear", heads = 3, lq = 37, lk = 41, dk = 7, dv = 5, norm = "none", fuse = "mean" }
