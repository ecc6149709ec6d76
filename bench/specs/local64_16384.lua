return {
  name = "local64_16384", heads = 4,
  lq = 16384, lk = 16384, dk = 64, dv = 64,
  fuse = "none",
  mask = { kind = "local", radius = 64 },
}
