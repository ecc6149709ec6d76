return { name = "g_nd_collection", form = "collection", channels = 3, map = { 5, 3 }, count = 7,
  f_q = "identity", f_k = "identity", f_v = "identity", g_v = "fold", fuse = "max" }
