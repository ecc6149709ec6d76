-- 1-D neighborhood, fused mean.
return { name = "g_nd_neighborhood_1d", form = "neighborhood", map = { 37 }, kernel = 7, heads = 1, dk = 5, dv = 3,
  fuse = "mean" }
