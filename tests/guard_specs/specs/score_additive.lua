-- vᵀtanh(W_q q + W_k k) with da ≠ dk: w_q, w_k, v_a guarded.
return { name = "g_score_additive", heads = 2, lq = 13, lk = 11, dk = 5, dv = 7, da = 6, score = "additive",
  fuse = "none" }
