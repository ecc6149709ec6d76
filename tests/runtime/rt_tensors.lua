-- runtime fixture: run-time tensors of mask_mod and score_mod (docs/masks.md):
-- a document mask (packed sequences) and an additive bias per head, listed in
-- NAME_params' order; libheed's canonical text (runtime/problem.c) must be the
-- generator's for the tuned object to load by hash, and its table adapter
-- passes heed_params.tensors to the kernel
return { name = "rt_tensors", heads = 2, lq = 19, lk = 19, dk = 8, dv = 8, fuse = "none",
         tensors = { { name = "doc", dtype = "i32", shape = { "lk" } },
                     { name = "bias", dtype = "f32", shape = { "heads", "lq", "lk" } } },
         mask_mod = { kind = "document", ids = "doc" },
         score_mod = { kind = "bias", tensor = "bias", per_head = true } }
