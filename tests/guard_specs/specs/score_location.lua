-- S[i,:] = W q_i, W [heads][lk][dk]: k is not read (passed as NULL).
return { name = "g_score_location", heads = 2, lq = 13, lk = 17, dk = 5, dv = 6, score = "location",
  fuse = "none" }
