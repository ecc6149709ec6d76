-- fault tests: a generated fused kernel (the seed's mean-pooled attention)
return { name = "ft_fused", heads = 3, lq = 9, lk = 12, dk = 6, dv = 4,
         score = "dot", norm = "softmax", fuse = "mean", mask = "none" }
