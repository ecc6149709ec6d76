-- runtime test fixture: a different problem, for "the object computes another problem"
return { name = "rt_other", heads = 1, lq = 16, lk = 16, dk = 8, dv = 8,
         score = "dot", norm = "relu", fuse = "max", mask = "none" }
