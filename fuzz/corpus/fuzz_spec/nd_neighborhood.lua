-- Stand-alone self-attention over a feature map (SASA, NATTEN): each pixel
-- of a 56 x 56 map attends to the 7 x 7 window around itself (shifted to
-- stay inside the map), with SASA's row and column relative position tables.
return {
  name = "nd_neighborhood",
  form = "neighborhood",
  map = { 56, 56 }, kernel = { 7, 7 }, dilation = { 1, 1 },
  heads = 1, dk = 64, dv = 64,
  score = "scaled_dot", norm = "softmax", fuse = "none",
  bias = { kind = "relative", clip = 3 },
}
