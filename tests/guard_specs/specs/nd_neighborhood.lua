-- 2-D neighborhood attention on a 13 x 11 map, a 5 x 3 window with dilation,
-- relative position bias (its tables guarded too).
return { name = "g_nd_neighborhood", form = "neighborhood", map = { 13, 11 }, kernel = { 5, 3 },
  dilation = { 1, 2 }, heads = 2, dk = 9, dv = 7, fuse = "none", bias = { kind = "relative", clip = { 2, 1 } } }
