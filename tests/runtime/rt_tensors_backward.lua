-- runtime test fixture: run-time tensors of mask_mod and score_mod (a
-- document mask, a per-head additive bias) on grouped heads, with the
-- backward: libheed's plan of it runs the tuned NAME_backward, given
-- NAME_params with the tensors (tests/runtime/t_tuned_mods.c)
return { name = "rt_tensors_backward", heads = 4, heads_kv = 2, lq = 13, lk = 13, dk = 5, dv = 3,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none", backward = true,
         tensors = { { name = "doc", dtype = "i32", shape = { 13 } },
                     { name = "bias", dtype = "f32", shape = { 4, 13, 13 } } },
         mask_mod = "doc[q] == doc[k]", score_mod = "s + bias[(h * lq + q) * lk + k]" }
