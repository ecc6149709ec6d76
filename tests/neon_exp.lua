-- test-neon (mk/neon.mk): a kernel built with -O3 -ffast-math that calls
-- vf_exp twice (the sigmoid and the Gaussian window weights); vit_pool's
-- softmax covers vf_exp2.
return { name = "neon_exp", heads = 2, lq = 29, lk = 31, dk = 8, dv = 5, score = "dot", scale = 4,
         norm = "sigmoid", fuse = "mean", mask = { kind = "local", radius = 5, gaussian = true } }
