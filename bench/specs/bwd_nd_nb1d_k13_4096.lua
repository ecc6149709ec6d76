-- A 1-D neighborhood backward: a sequence of 4096 tokens, windows of 13,
-- 4 heads on 2 K/V heads, C = 64 (`heed bench ... --pass backward`, as
-- bench/specs/bwd_nd_nb7x7_56.lua); docs/backward.md, "N-d forms".
return { name = "bwd_nd_nb1d_k13_4096", form = "neighborhood", map = { 4096 }, kernel = { 13 },
         heads = 4, heads_kv = 2, dk = 64, dv = 64, fuse = "none", backward = true }
