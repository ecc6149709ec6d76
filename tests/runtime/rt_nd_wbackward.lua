-- runtime test fixture: an N-d kernel whose NAME_backward takes weights
-- (NAME_params, NAME_grads): general's W and a relative bias, 2-D
-- neighborhood windows with dilation, two query heads on one K/V head
return { name = "rt_nd_wbackward", form = "neighborhood", map = { 7, 6 }, kernel = { 3, 3 }, dilation = { 1, 2 },
         heads = 2, heads_kv = 1, dk = 5, dv = 3, score = "general", norm = "softmax", fuse = "none",
         bias = { kind = "relative", clip = { 1, 2 } }, backward = true }
