-- runtime test fixture: rt_nd_backward's problem with 16-bit storage (bf16
-- q, k, v, an f16 out), loaded as a tuned kernel: libheed's 16-bit N-d
-- backward plans call its own NAME_backward with the 16-bit arguments
-- (tests/runtime/t_nd_backward16.c)
return { name = "rt_nd_backward16", form = "neighborhood", map = { 7, 6 }, kernel = { 3, 3 }, dilation = { 1, 2 },
         heads = 2, heads_kv = 1, dk = 5, dv = 3, score = "scaled_dot", norm = "softmax", fuse = "none",
         dtype = "bf16", out_dtype = "f16", backward = true }
