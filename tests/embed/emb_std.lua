-- test-embed: standard attention with lq != lk and a causal mask.
return { name = "emb_std", heads = 2, lq = 20, lk = 28, dk = 8, dv = 12, fuse = "none", mask = "causal" }
