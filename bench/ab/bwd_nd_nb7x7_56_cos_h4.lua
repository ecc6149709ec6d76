-- (Not in bench/specs: make bench does not run it.)
-- A 7x7 neighborhood on a 56x56 map, C = 64, four heads, score cosine,
-- float32: the backward of a score on prepared rows, run a batch item at a
-- time (templates/nd_backward_wide.c). `BACKWARD=1 BATCH=8 bench/ab/run.sh
-- bench/ab/bwd_nd_nb7x7_56_cos_h4.lua REV` times it against REV's (with
-- score = "general" the same for W's gradient); docs/backward.md, "N-d
-- forms", Per batch item.
return { name = "bwd_nd_nb7x7_56_cos_h4", form = "neighborhood", map = { 56, 56 }, kernel = { 7, 7 },
         heads = 4, dk = 64, dv = 64, score = "cosine", fuse = "none", backward = true }
