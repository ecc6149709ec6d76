return { name = "g_score_general_mean", lq = 17, lk = 13, dk = 9, dv = 3, score = "general", fuse = "mean",
  mask = "causal" }
