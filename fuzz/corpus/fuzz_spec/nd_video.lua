-- A 3-D neighbourhood over video features: 8 frames of 14 x 14, a 3 x 5 x 5
-- window, dilation 2 in space.
return {
  name = "nd_video",
  form = "neighborhood",
  map = { 8, 14, 14 }, kernel = { 3, 5, 5 }, dilation = { 1, 2, 2 },
  heads = 2, dk = 16, dv = 16,
  fuse = "none",
}
