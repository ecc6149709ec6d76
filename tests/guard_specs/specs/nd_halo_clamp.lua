return { name = "g_nd_halo_clamp", form = "halo", map = { 11, 9 }, block = 3, halo = 1, padding = "clamp",
  heads = 1, dk = 4, dv = 8, fuse = "none" }
