return { name = "g_score_cosine_mean", lq = 9, lk = 33, dk = 3, dv = 8, score = "cosine", fuse = "mean" }
