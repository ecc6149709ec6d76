return { name = "g_score_cosine", heads = 2, lq = 21, lk = 19, dk = 7, dv = 6, score = "cosine", scale = 4,
  fuse = "none", mask = "causal" }
