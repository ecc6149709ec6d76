-- Shaw et al. relative positions on a sequence: 1-D local attention (a
-- window of 15) with bias(i, j) = w[clip(j - i, 4)] added to the score.
return {
  name = "nd_shaw",
  form = "neighborhood",
  map = { 128 }, kernel = 15,
  heads = 4, dk = 32, dv = 32,
  fuse = "none",
  bias = { kind = "relative", clip = 4 },
}
