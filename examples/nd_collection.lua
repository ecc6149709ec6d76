-- The seed's second case: a collection of 6 tensors (4 x 8 x 8), each one
-- token, fused into one tensor of the same shape.
return {
  name = "nd_collection",
  form = "collection",
  channels = 4, map = { 8, 8 }, count = 6,
  f_q = "identity", f_k = "identity", f_v = "identity", g_v = "fold",
  fuse = "mean",
}
