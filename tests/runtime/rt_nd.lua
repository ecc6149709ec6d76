-- runtime test fixture: an N-d problem (neighborhood windows with a relative
-- bias), loaded by N-d plans as a tuned kernel (heed_nd_table)
return { name = "rt_nd", form = "neighborhood", map = { 7, 6 }, kernel = { 3, 3 }, dilation = { 1, 2 },
         heads = 2, dk = 5, dv = 3, score = "scaled_dot", norm = "softmax", fuse = "none",
         bias = { kind = "relative", clip = { 1, 2 } } }
