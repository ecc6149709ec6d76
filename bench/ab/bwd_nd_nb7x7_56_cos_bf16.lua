-- (Not in bench/specs: make bench does not run it.)
-- bench/specs/bwd_nd_nb7x7_56.lua with score cosine and bfloat16 storage
-- (q, k, v, out and the gradients bf16): the 16-bit backward of a score on
-- prepared rows (templates/nd_backward_wide.c: a batch item widened at a
-- time). `BACKWARD=1 BATCH=8 bench/ab/run.sh
-- bench/ab/bwd_nd_nb7x7_56_cos_bf16.lua REV` times it against REV's;
-- docs/backward.md, "N-d forms", 16-bit storage.
return { name = "bwd_nd_nb7x7_56_cos_bf16", form = "neighborhood", map = { 56, 56 }, kernel = { 7, 7 },
         heads = 1, dk = 64, dv = 64, score = "cosine", dtype = "bf16", out_dtype = "bf16", fuse = "none",
         backward = true }
