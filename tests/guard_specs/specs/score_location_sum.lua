return { name = "g_score_location_sum", lq = 7, lk = 29, dk = 3, dv = 5, score = "location", fuse = "sum",
  mask = "causal" }
