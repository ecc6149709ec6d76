-- The halo form's backward (HaloNet / Swin-like blocked local attention:
-- 8 x 8 query blocks each seeing its block and a halo of 3 around it, zero
-- padding, on a 56 x 56 map, C = 64, one head): `heed bench
-- bench/specs/bwd_nd_halo8_56.lua --pass backward` times NAME_backward
-- (templates/nd_hbackward.c, plain loops) against the N-d reference's
-- backward (peer_naive); docs/backward.md, "Halo" and "Speed".
return { name = "bwd_nd_halo8_56", form = "halo", map = { 56, 56 }, block = 8, halo = 3, padding = "zero",
         heads = 1, dk = 64, dv = 64, fuse = "none", backward = true }
