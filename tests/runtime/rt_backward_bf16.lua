-- runtime test fixture: rt_backward's problem with bf16 q, k, v and a bf16
-- out, loaded as a tuned kernel: libheed's 16-bit token plan of it runs its
-- own NAME_backward (16-bit signature) with the 16-bit arguments
-- (tests/runtime/t_backward16.c)
return { name = "rt_backward_bf16", heads = 4, heads_kv = 2, lq = 13, lk = 11, dk = 7, dv = 5,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "causal",
         dtype = "bf16", out_dtype = "bf16", backward = true }
