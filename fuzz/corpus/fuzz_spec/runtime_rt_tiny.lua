-- runtime benchmark fixture: a tiny problem, so a call is mostly overhead
return { name = "rt_tiny", heads = 1, lq = 4, lk = 4, dk = 4, dv = 4,
         score = "scaled_dot", norm = "softmax", fuse = "none", mask = "none" }
