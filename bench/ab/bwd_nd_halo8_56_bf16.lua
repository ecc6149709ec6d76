-- (Not in bench/specs: make bench does not run it.)
-- bench/specs/bwd_nd_halo8_56.lua with bfloat16 storage (q, k, v, out and
-- the gradients bf16): the halo's 16-bit backward (templates/nd_hbackward.c:
-- a step of batch items widened at a time). `BACKWARD=1 BATCH=8
-- bench/ab/run.sh bench/ab/bwd_nd_halo8_56_bf16.lua REV` times it against
-- REV's; docs/backward.md, "Halo, 16-bit".
return { name = "bwd_nd_halo8_56_bf16", form = "halo", map = { 56, 56 }, block = 8, halo = 3, padding = "zero",
         heads = 1, dk = 64, dv = 64, dtype = "bf16", out_dtype = "bf16", fuse = "none", backward = true }
