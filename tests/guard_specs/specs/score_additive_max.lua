return { name = "g_score_additive_max", lq = 11, lk = 17, dk = 4, dv = 3, da = 9, score = "additive",
  fuse = "max", mask = { kind = "local", radius = 2 } }
