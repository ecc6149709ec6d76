-- test-embed: fused attention (out [batch][H][Dv]).
return { name = "emb_fused", heads = 3, lq = 17, dk = 8, dv = 4, fuse = "mean" }
