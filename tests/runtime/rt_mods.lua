-- runtime fixture: mask_mod and score_mod (docs/masks.md), written
-- unnormalized: libheed's canonical text (runtime/expr.c) must be the
-- generator's for the tuned object to load by hash
return { name = "rt_mods", heads = 2, lq = 21, lk = 21, dk = 8, dv = 8, fuse = "none",
         mask_mod = "q>=k&&((q-k)<5||k%4==0)", score_mod = "h>0?30*tanh(s/30):s-abs(q-k)*0.25" }
