-- runtime test fixture: an N-d problem with NAME_backward (backward = true,
-- docs/backward.md "N-d forms"), loaded as a tuned kernel: 2-D neighborhood
-- windows with dilation, two query heads on one K/V head, odd sizes
return { name = "rt_nd_backward", form = "neighborhood", map = { 7, 6 }, kernel = { 3, 3 }, dilation = { 1, 2 },
         heads = 2, heads_kv = 1, dk = 5, dv = 3, score = "scaled_dot", norm = "softmax", fuse = "none",
         backward = true }
