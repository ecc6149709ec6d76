return { name = "g_score_dot", heads = 2, lq = 19, lk = 23, dk = 6, dv = 5, score = "dot", fuse = "none" }
