-- runtime test fixture: a token kernel whose NAME_backward takes the
-- additive score's weights (W_q, W_k, v_a in NAME_params, their gradients
-- in NAME_grads): grouped heads, a causal mask with lq > lk, odd sizes
return { name = "rt_wbackward", heads = 4, heads_kv = 2, lq = 13, lk = 11, dk = 7, dv = 5, da = 6,
         score = "additive", norm = "softmax", fuse = "none", mask = "causal", backward = true }
