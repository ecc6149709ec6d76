return { name = "g_nd_patches_flat", form = "patches", channels = 2, map = { 9, 7 }, window = { 3, 3 },
  stride = { 2, 2 }, f_q = "identity", f_k = "identity", f_v = "identity", g_v = "flat", fuse = "none" }
