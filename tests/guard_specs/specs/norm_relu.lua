-- one_pass: fused with an elementwise norm.
return { name = "g_norm_relu", lq = 31, lk = 37, dk = 5, dv = 3, norm = "relu", fuse = "max",
  mask = { kind = "local", radius = 4, gaussian = true } }
