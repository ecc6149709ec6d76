-- A local window near both ends of the rows, lq ≠ lk.
return { name = "g_local", heads = 2, lq = 37, lk = 53, dk = 8, dv = 5, fuse = "none",
  mask = { kind = "local", radius = 3 } }
