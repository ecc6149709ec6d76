-- 2-D neighborhood attention (NATTEN): each pixel of a 56 x 56 map attends
-- to the 7 x 7 window around itself, C = 64, one head (make bench-nd's
-- smallest map), through `heed bench` like the token specs: peer_blas is the
-- im2col + OpenBLAS composition (bench/nd_peers.c), peer_naive the reference.
return { name = "nd_nb7x7_56", form = "neighborhood", map = { 56, 56 }, kernel = { 7, 7 },
         heads = 1, dk = 64, dv = 64, fuse = "none" }
