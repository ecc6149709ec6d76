-- qᵀWk: W [heads][dk][dk] in a guarded buffer too.
return { name = "g_score_general", heads = 2, lq = 19, lk = 23, dk = 6, dv = 5, score = "general", fuse = "none" }
