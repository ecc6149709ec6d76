-- A Gaussian local window, fused sum.
return { name = "g_local_gauss", lq = 130, lk = 67, dk = 6, dv = 11, fuse = "sum",
  mask = { kind = "local", radius = 5, gaussian = true } }
