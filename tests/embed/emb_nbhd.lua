-- test-embed: 2-D neighborhood attention (q, k, v and out over the map's pixels).
return { name = "emb_nbhd", form = "neighborhood", map = { 9, 11 }, kernel = { 3, 3 }, dilation = { 1, 1 },
  heads = 2, dk = 8, dv = 4, fuse = "none" }
