-- fault tests: a generated kernel (standard causal softmax attention, odd shapes)
return { name = "ft_causal", heads = 2, lq = 13, lk = 11, dk = 8, dv = 5,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "causal" }
