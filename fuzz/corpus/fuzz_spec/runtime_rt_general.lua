-- runtime test fixture: run-time weights (general score), Gaussian local window
return { name = "rt_general", heads = 2, lq = 19, lk = 23, dk = 8, dv = 5,
         score = "general", norm = "sigmoid", fuse = "none",
         mask = { kind = "local", radius = 3, gaussian = true } }
