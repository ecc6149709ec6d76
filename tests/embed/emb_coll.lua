-- test-embed: a collection of tensors fused into one, folded back (x and out shaped by the maps).
return { name = "emb_coll", form = "collection", channels = 4, map = { 4, 4 }, count = 5,
  f_q = "identity", f_k = "identity", f_v = "identity", g_v = "fold", fuse = "mean" }
