-- a tuned kernel with NAME_backward (backward = true, docs/backward.md):
-- grouped heads, a causal mask with lq > lk (rows with no key), odd sizes
return { name = "rt_backward", heads = 4, heads_kv = 2, lq = 13, lk = 11, dk = 7, dv = 5,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "causal", backward = true }
