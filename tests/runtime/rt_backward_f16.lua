-- runtime test fixture: a general score (run-time W, its gradient) with f16
-- q, k, v and a float out, lq < lk, two heads on one K/V head, loaded as a
-- tuned kernel: libheed's 16-bit token plan of it runs its own
-- NAME_backward (16-bit signature, NAME_params and NAME_grads)
-- (tests/runtime/t_backward16.c)
return { name = "rt_backward_f16", heads = 2, heads_kv = 1, lq = 6, lk = 13, dk = 5, dv = 4,
         score = "general", scale = 0.5, norm = "softmax", fuse = "none", mask = "none",
         dtype = "f16", out_dtype = "f32", backward = true }
