-- HaloNet blocks of 4 on a 13 x 10 map (blocks cut at the edges), halo 2,
-- zero padding, relative bias.
return { name = "g_nd_halo", form = "halo", map = { 13, 10 }, block = 4, halo = 2, padding = "zero",
  heads = 2, dk = 6, dv = 5, fuse = "none", bias = { kind = "relative", clip = { 3, 3 } } }
