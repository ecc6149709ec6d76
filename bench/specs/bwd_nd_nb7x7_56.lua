-- The backward of bench/specs/nd_nb7x7_56.lua (2-D neighborhood attention,
-- 7 x 7 windows on a 56 x 56 map, C = 64, one head): `heed bench
-- bench/specs/bwd_nd_nb7x7_56.lua --pass backward` times NAME_backward
-- (templates/nd_backward.c) against the N-d reference's backward
-- (peer_naive); docs/backward.md, "N-d forms".
return { name = "bwd_nd_nb7x7_56", form = "neighborhood", map = { 56, 56 }, kernel = { 7, 7 },
         heads = 1, dk = 64, dv = 64, fuse = "none", backward = true }
